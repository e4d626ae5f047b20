"""The attention implementations by name, and the platforms each runs on: plain data, without JAX.

The job's driver checks an `--attention` name against the cluster's platform
before any encoder starts, and never imports JAX (`_dispatch` adds each one's
function and its dtype and shape limits).
"""

from __future__ import annotations

PLATFORMS: dict[str, frozenset[str] | None] = {  # None: every platform
    "reference": None,
    "blockwise": None,
    # On CPU in Pallas interpret mode: an emulator for tests, so `auto` never picks it there.
    "pallas": frozenset({"cpu", "gpu", "tpu"}),
    "tpu_flash": frozenset({"tpu"}),
    "tpu_splash": frozenset({"tpu"}),
    "cudnn": frozenset({"gpu"}),
}
IMPLS = tuple(PLATFORMS)
# The implementations that add a relative position bias (MPNet's, T5's): the plain-JAX ones, which gather it per
# tile, and this project's Pallas kernel, which reads it as whole tiles. JAX's kernels' scores live inside kernels
# that take no additive term.
RELATIVE_BIAS_IMPLS = frozenset({"reference", "blockwise", "pallas"})


def runs_on(impl: str, platform: str) -> bool:
    """Whether `impl` ("auto" or a name in IMPLS) can run on `platform` ("cpu", "gpu", "tpu"),
    dtype and shape limits aside: for a caller that knows where it will run before it traces."""
    platforms = None if impl == "auto" else PLATFORMS[impl]
    return platforms is None or platform in platforms
