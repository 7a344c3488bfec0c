module vslice.invalid/benchmarks/nullextender

go 1.22
