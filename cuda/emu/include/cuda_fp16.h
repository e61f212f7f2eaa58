// cuda_fp16.h for the CPU emulation (cuda/emu/cuda_emu.h): make cuda-emu compiles the
// kernels with -I cuda/emu/include.
#pragma once
#include "../cuda_emu.h"
