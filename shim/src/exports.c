/* Preprocessed by the Makefile into the linker version script: only the hooks are exported. */
#define VS_HOOK(lib, name, ret, params) name;
#define VS_USE(lib, name, ret, params)
#define VS_LOADER(name) name;
{ global:
#include "hooks.def"
local: *; };
