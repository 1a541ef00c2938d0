"""KIT_CPU_ISA=avx2 (serve/config/machine.py): vLLM's processes pick their kernels as on a CPU without AVX-512.

vLLM 0.32 loads `_C_AVX512` or `_C_AVX2` by asking torch (`torch.cpu._is_avx512_supported()`, CpuPlatform.
import_kernels) and picks its attention ISA the same way; torch's own kernels and inductor's generated code follow
ATEN_CPU_CAPABILITY, oneDNN's ONEDNN_MAX_CPU_ISA (both set beside this folder on PYTHONPATH). Python imports this
module at start-up in every process of the engine, before vLLM.
"""

import torch.cpu

for _name in (
    "_is_avx512_supported",
    "_is_avx512_bf16_supported",
    "_is_avx512_vnni_supported",
    "_is_amx_tile_supported",
    "_is_amx_fp16_supported",
):
    if hasattr(torch.cpu, _name):
        setattr(torch.cpu, _name, lambda: False)
