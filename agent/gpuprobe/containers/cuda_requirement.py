"""An image's CUDA requirement, as the NVIDIA Container Toolkit reads and evaluates it.

Which requirements a container has (nvidia-container-toolkit, `internal/config/image`,
`CUDA.GetRequirements`): the value of every `NVIDIA_REQUIRE_*` variable but
`NVIDIA_REQUIRE_JETPACK`; none when `NVIDIA_DISABLE_REQUIRE` is true; and for a "legacy"
image (`CUDA_VERSION` set, `NVIDIA_REQUIRE_CUDA` not) `cuda>=<major.minor of CUDA_VERSION>`.

How each is evaluated (libnvidia-container, `src/cli/dsl.c` and `src/cli/configure.c`):
space-separated groups are alternatives (the requirement holds when one group holds),
comma-separated clauses within a group must all hold; a clause is `<rule><op><value>` with
op `=`, `!=`, `<`, `<=`, `>`, `>=` and rule `cuda` (the driver's CUDA version), `driver`
(the kernel driver's version), `arch` (the GPU's compute capability) or `brand` (the GPU's
brand, compared without case, `=` and `!=` only). Versions compare number by number, a
missing trailing part counting as less (`12.4 < 12.4.1`). A rule whose fact is unknown
holds (no GPU visible: `brand` and `arch` hold). Every requirement is evaluated against
every GPU the container is given; one failure refuses the container with
`unsatisfied condition: <the requirement's first group>`.

NVIDIA's CUDA base images encode forward compatibility this way:
`cuda>=12.8 brand=tesla,driver>=550,driver<551 ...` holds on a driver older than CUDA 12.8
when the GPU is of a listed brand and its driver on one of the listed branches (the image
ships `cuda-compat-12-8`, which only those run).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

TRUE_WORDS = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go's strconv.ParseBool
REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
REQUIRE_JETPACK = "NVIDIA_REQUIRE_JETPACK"
OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
RULES = ("cuda", "driver", "arch", "brand")
# NVML's brand numbers (nvmlBrandType_t) as the requirement language names them (the names
# NVIDIA's CUDA images use in their brand clauses).
BRANDS = {
    0: "unknown",
    1: "quadro",
    2: "tesla",
    3: "nvs",
    4: "grid",
    5: "geforce",
    6: "titan",
    7: "vapps",
    8: "vpc",
    9: "vcs",
    10: "vws",
    11: "cloudgaming",
    12: "quadrortx",
    13: "nvidiartx",
    14: "nvidia",
    15: "geforcertx",
    16: "titanrtx",
}
_CUDA_CLAUSE = re.compile(r"^cuda>=(\d+(?:\.\d+)*)$", re.IGNORECASE)


def requirements(env: dict[str, str]) -> list[str]:
    """The requirements the toolkit checks for a container with this environment."""
    if env.get("NVIDIA_DISABLE_REQUIRE", "") in TRUE_WORDS:
        return []
    found = [
        value
        for name, value in sorted(env.items())
        if name.startswith(REQUIRE_PREFIX) and not name.startswith(REQUIRE_JETPACK)
    ]
    legacy = legacy_cuda(env)
    if legacy is not None:
        found.append(f"cuda>={legacy}")
    return found


def legacy_cuda(env: dict[str, str]) -> str | None:
    """`major.minor` of CUDA_VERSION for a legacy image (no NVIDIA_REQUIRE_CUDA), else None."""
    if "NVIDIA_REQUIRE_CUDA" in env or "CUDA_VERSION" not in env:
        return None
    found = re.match(r"^(\d+)\.(\d+)", env["CUDA_VERSION"].strip())
    return f"{found.group(1)}.{found.group(2)}" if found else None


def required_cuda(requirement: str) -> str | None:
    """The `cuda>=X` of a requirement's first group (`12.8` of `cuda>=12.8 brand=...`)."""
    first = next((g for g in requirement.split(" ") if g), "")
    for clause in first.split(","):
        found = _CUDA_CLAUSE.match(clause)
        if found:
            return found.group(1)
    return None


@dataclass(frozen=True)
class Facts:
    """What the rules compare: the driver's versions and one GPU's (None: no GPU visible)."""

    cuda: str | None  # the driver's CUDA version, "12.4"
    driver: str | None  # "550.54.15"
    arch: str | None = None  # compute capability, "9.0"
    brand: str | None = None  # "tesla", "nvidia", "geforce", ...


class Outcome(enum.StrEnum):
    """How a requirement fared."""

    SATISFIED = "satisfied"
    UNSATISFIED = "unsatisfied"
    INVALID = "invalid"  # the toolkit refuses with "invalid expression"


@dataclass(frozen=True)
class Verdict:
    """A requirement's outcome; `group` the alternative that held (its text), `condition`
    the first group the runtime names when it refuses."""

    outcome: Outcome
    group: str | None = None
    condition: str | None = None

    @property
    def message(self) -> str | None:
        """The runtime's own error text for a refused requirement."""
        if self.outcome is Outcome.INVALID:
            return "requirement error: invalid expression"
        if self.outcome is Outcome.UNSATISFIED:
            text = f"requirement error: unsatisfied condition: {self.condition}"
            if (self.condition or "").lower().startswith("cuda>="):
                text += (
                    ", please update your driver to a newer version, or use an earlier "
                    "cuda container"
                )
            return text
        return None


def evaluate(requirement: str, facts: Facts) -> Verdict:
    """Evaluate one requirement as libnvidia-container's dsl_evaluate does."""
    held: bool | None = True
    for group in requirement.split(" "):
        if not group:
            continue
        clauses = [c for c in group.split(",") if c]
        for clause in clauses:
            held = _clause(clause, facts)
            if held is None:
                return Verdict(Outcome.INVALID)
            if not held:
                break
        else:
            return Verdict(Outcome.SATISFIED, group=group)
    if held:
        return Verdict(Outcome.SATISFIED)
    first = next((g for g in requirement.split(" ") if g), "")
    return Verdict(Outcome.UNSATISFIED, condition=first)


def _clause(clause: str, facts: Facts) -> bool | None:
    found = re.match(r"^([^<>=!]+)([<>=!]+)(.*)$", clause)
    if found is None or found.group(2) not in OPERATORS or not found.group(3):
        return None
    rule, op, value = found.group(1).lower(), found.group(2), found.group(3)
    if rule not in RULES:
        return None
    fact = {"cuda": facts.cuda, "driver": facts.driver, "arch": facts.arch}.get(rule)
    if rule == "brand":
        if facts.brand is None:
            return True
        if op == "=":
            return facts.brand.lower() == value.lower()
        if op == "!=":
            return facts.brand.lower() != value.lower()
        return None
    if fact is None:
        return True
    return compare_version(fact, op, value)


def compare_version(v1: str, op: str, v2: str) -> bool | None:
    """libnvidia-container's dsl_compare_version: number by number, a version with more
    non-zero parts after the common ones is the greater; None for a non-version."""
    if not re.fullmatch(r"[0-9.]*", v1) or not re.fullmatch(r"[0-9.]*", v2):
        return None
    a = [int(p) for p in v1.split(".") if p]
    b = [int(p) for p in v2.split(".") if p]
    if not a or not b:
        return None
    for x, y in zip(a, b, strict=False):
        if x != y:
            return {
                "=": False,
                "!=": True,
                "<": x < y,
                "<=": x < y,
                ">": x > y,
                ">=": x > y,
            }[op]
    rest_a = any(a[len(b) :])
    rest_b = any(b[len(a) :])
    if op == "!=":
        return rest_a or rest_b
    if op in ("=", "<=", ">=") and not rest_a and not rest_b:
        return True
    if op == "=":
        return False
    if op in ("<", "<="):
        return not rest_a and rest_b
    return rest_a and not rest_b
