"""csrc/pointwise.h's exp_of(float), the exp of every CPU functor in float: within 1 ulp of the correctly
rounded exp over a sweep of all floats (every 61st bit pattern: 70 million), subnormal results, overflow,
infinities and NaN included; and g++ vectorizes a loop of it with the flags the generated setup.py passes."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from .conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"

CHECK = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

EXP_OF

static uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Every output of exp_of over `x` into `y`: the loop g++ must vectorize.
void exp_all(const float* __restrict x, float* __restrict y, int n) {
  for (int i = 0; i < n; ++i) {
    y[i] = exp_of(x[i]);
  }
}

int main() {
  const float smallest_normal = std::numeric_limits<float>::min();
  const float subnormal_ulp = std::numeric_limits<float>::denorm_min();
  long checked = 0, wrong = 0;
  uint32_t worst_ulps = 0;
  auto check = [&](float x) {
    const float got = exp_of(x);
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    ++checked;
    bool ok;
    if (std::isnan(x)) {
      ok = std::isnan(got);
    } else if (std::isinf(want) || want == 0.0f || want < smallest_normal) {
      ok = std::fabs(got - want) <= subnormal_ulp || got == want;
    } else {
      const uint32_t ulps = bits_of(got) > bits_of(want) ? bits_of(got) - bits_of(want) : bits_of(want) - bits_of(got);
      worst_ulps = ulps > worst_ulps ? ulps : worst_ulps;
      ok = !std::isnan(got) && ulps <= 1;
    }
    if (!ok && wrong++ < 10) {
      std::printf("wrong: exp_of(%.9g) = %.9g, exp = %.9g\n", x, got, want);
    }
  };
  for (uint64_t b = 0; b < (1ull << 32); b += 61) {
    const uint32_t u = static_cast<uint32_t>(b);
    float x;
    std::memcpy(&x, &u, sizeof x);
    check(x);
  }
  const float edges[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-8f, -1e-8f, 88.72283f, 88.72284f, 88.7229f, 89.0f,
                         -87.33654f, -87.3366f, -103.27893f, -103.972f, -103.973f, -104.0f, -150.0f,
                         std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(), subnormal_ulp, -subnormal_ulp};
  for (float x : edges) {
    check(x);
  }
  std::printf("checked %ld, wrong %ld, worst %u ulp\n", checked, wrong, worst_ulps);
  return wrong == 0 ? 0 : 1;
}
"""


def exp_of_source() -> str:
    """The float exp_of as the generated csrc/pointwise.h defines it (the golden fused example's)."""
    header = (GOLDEN / "fused/kfused/csrc/pointwise.h").read_text()
    match = re.search(r"^inline float exp_of\(float x\) \{\n.*?^\}\n", header, re.DOTALL | re.MULTILINE)
    assert match, "csrc/pointwise.h has no exp_of(float)"
    return match.group(0)


def generated_cxx_flags() -> list[str]:
    setup = (GOLDEN / "fused/setup.py").read_text()
    flags = re.search(r'^CXX_FLAGS = \[(.*)\]$', setup, re.MULTILINE).group(1)
    return [flag.strip().strip('"') for flag in flags.split(",")]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_exp_of_is_within_one_ulp_and_vectorized(tmp_path):
    source = tmp_path / "check.cpp"
    source.write_text(CHECK.replace("EXP_OF", exp_of_source()))
    flags = generated_cxx_flags()
    assert "-fno-trapping-math" in flags
    build = subprocess.run(["g++", *flags, "-std=c++17", "-fopt-info-vec-optimized", "-o", str(tmp_path / "check"),
                            str(source)], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    loop_line = CHECK.replace("EXP_OF", exp_of_source()).splitlines().index("  for (int i = 0; i < n; ++i) {") + 1
    assert re.search(rf"check\.cpp:{loop_line}:\d+: optimized: loop vectorized", build.stderr), build.stderr
    run = subprocess.run([str(tmp_path / "check")], capture_output=True, text=True, check=False, timeout=600)
    print(run.stdout)
    assert run.returncode == 0, run.stdout
    assert "wrong 0" in run.stdout
