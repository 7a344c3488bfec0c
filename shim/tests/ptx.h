/*
 * Two kernels as PTX, so the test programs also run real kernels on a real GPU (the driver
 * compiles PTX for the card it finds; the fake driver ignores the image):
 *   empty()                  returns at once (launch cost)
 *   spin(unsigned long long cycles)  busy-waits that many SM clock cycles
 */
#ifndef VSLICE_TEST_PTX_H
#define VSLICE_TEST_PTX_H

static const char test_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry empty()\n"
    "{\n"
    "    ret;\n"
    "}\n"
    ".visible .entry spin(.param .u64 cycles)\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b64 %rd<6>;\n"
    "    ld.param.u64 %rd1, [cycles];\n"
    "    mov.u64 %rd2, %clock64;\n"
    "LOOP:\n"
    "    mov.u64 %rd3, %clock64;\n"
    "    sub.s64 %rd4, %rd3, %rd2;\n"
    "    setp.lt.u64 %p1, %rd4, %rd1;\n"
    "    @%p1 bra LOOP;\n"
    "    ret;\n"
    "}\n";

#endif
