// Nothing to compile: the module only declares LLVMFuzzerRunDriver (include/CLibFuzzer.h).
#include "CLibFuzzer.h"
