"""The precision every matmul of the kernels asks for: its operands' own.

    MATMUL_PRECISION  # pass as `precision=` to each dot, einsum and tensordot

Left at DEFAULT, JAX leans toward speed: a float32 dot may run on a reduced-
precision path, TensorFloat-32 (10 mantissa bits) on NVIDIA GPUs since Ampere
and one bfloat16 pass on TPU (https://docs.jax.dev/en/latest/201/precision.html).
Pallas's Triton lowering does the same inside our flash kernel. The encoder's
dtype is chosen in one place (`kernels.compute_dtype`), and float32 there must
mean float32 arithmetic on every platform: bfloat16 is the fast choice, and it is
one flag away. bfloat16 operands lose nothing either way (their products are
exact in float32, where the dots accumulate), so they keep their full speed.
On CPU a float32 dot is float32 at every precision.
"""

import jax

MATMUL_PRECISION = jax.lax.Precision.HIGHEST
