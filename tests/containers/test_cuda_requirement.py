"""NVIDIA_REQUIRE_* as the NVIDIA Container Toolkit reads and evaluates it (libnvidia-container's
dsl.c: space = alternatives, comma = all of; per GPU; unknown facts hold)."""

from __future__ import annotations

import pytest

from gpuprobe.containers import cuda_requirement as req
from gpuprobe.containers.cuda_requirement import Facts, Outcome

# nvidia/cuda:12.8.0's requirement, first groups (the image lists 60 brand/branch pairs).
CUDA_12_8 = (
    "cuda>=12.8 brand=unknown,driver>=470,driver<471 brand=tesla,driver>=535,driver<536 "
    "brand=nvidia,driver>=550,driver<551 brand=tesla,driver>=550,driver<551"
)
H100_550 = Facts(cuda="12.4", driver="550.54.15", arch="9.0", brand="nvidia")
RTX4090_550 = Facts(cuda="12.4", driver="550.54.15", arch="8.9", brand="geforce")


def test_the_cuda_clause_alone_decides_on_a_new_enough_driver() -> None:
    verdict = req.evaluate(CUDA_12_8, Facts("12.8", "570.124.06", "9.0", "geforce"))
    assert verdict == req.Verdict(Outcome.SATISFIED, group="cuda>=12.8")


def test_a_brand_and_branch_alternative_holds_on_a_data_center_gpu() -> None:
    verdict = req.evaluate(CUDA_12_8, H100_550)
    assert verdict == req.Verdict(Outcome.SATISFIED, group="brand=nvidia,driver>=550,driver<551")


def test_no_alternative_holds_on_geforce_and_the_runtime_names_the_first_group() -> None:
    verdict = req.evaluate(CUDA_12_8, RTX4090_550)
    assert verdict.outcome is Outcome.UNSATISFIED
    assert verdict.condition == "cuda>=12.8"
    assert verdict.message == (
        "requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a "
        "newer version, or use an earlier cuda container"
    )


def test_every_clause_of_a_group_must_hold() -> None:
    # driver 551.x is past the branch: driver<551 fails, so the group fails.
    assert (
        req.evaluate(
            "cuda>=12.8 brand=nvidia,driver>=550,driver<551",
            Facts("12.4", "551.61", brand="nvidia"),
        ).outcome
        is Outcome.UNSATISFIED
    )


def test_without_a_visible_gpu_brand_and_arch_hold() -> None:
    verdict = req.evaluate("cuda>=12.8 brand=tesla,driver>=550", Facts("12.4", "550.54.15"))
    assert verdict == req.Verdict(Outcome.SATISFIED, group="brand=tesla,driver>=550")


def test_other_rules_and_operators() -> None:
    assert req.evaluate("arch>=8.0", H100_550).outcome is Outcome.SATISFIED
    assert req.evaluate("arch<9.0", H100_550).outcome is Outcome.UNSATISFIED
    assert req.evaluate("brand!=geforce", RTX4090_550).outcome is Outcome.UNSATISFIED
    assert req.evaluate("BRAND=NVIDIA", H100_550).outcome is Outcome.SATISFIED  # no case
    verdict = req.evaluate("driver>=560", H100_550)
    assert verdict.message == "requirement error: unsatisfied condition: driver>=560"


@pytest.mark.parametrize("bad", ["cuda=>12.4", "cuda>=", "gpu>=1", "brand>tesla", "cuda>=12.x"])
def test_an_invalid_expression_is_the_runtimes_error(bad: str) -> None:
    verdict = req.evaluate(bad, H100_550)
    assert verdict.outcome is Outcome.INVALID
    assert verdict.message == "requirement error: invalid expression"


@pytest.mark.parametrize(
    ("v1", "op", "v2", "expected"),
    [
        ("12.4", ">=", "12.4", True),
        ("12.4", ">=", "12.4.1", False),  # a missing part is less
        ("12.4.0", "=", "12.4", True),  # trailing zeros are equal
        ("12.10", ">", "12.9", True),  # number by number, not text
        ("550.54.15", "<", "551", True),
        ("550.54.15", "!=", "550.54.15", False),
    ],
)
def test_versions_compare_as_dsl_compare_version(v1: str, op: str, v2: str, expected: bool) -> None:
    assert req.compare_version(v1, op, v2) is expected


def test_which_variables_are_requirements() -> None:
    env = {
        "NVIDIA_REQUIRE_CUDA": "cuda>=12.4",
        "NVIDIA_REQUIRE_ARCH": "arch>=8.0",
        "NVIDIA_REQUIRE_JETPACK": "csv-mounts=all",
        "CUDA_VERSION": "12.4.1",
    }
    assert req.requirements(env) == ["arch>=8.0", "cuda>=12.4"]
    assert req.requirements({**env, "NVIDIA_DISABLE_REQUIRE": "true"}) == []
    assert req.requirements({**env, "NVIDIA_DISABLE_REQUIRE": "false"}) == [
        "arch>=8.0",
        "cuda>=12.4",
    ]


def test_a_legacy_image_requires_its_cuda_versions_major_minor() -> None:
    assert req.requirements({"CUDA_VERSION": "12.2.2"}) == ["cuda>=12.2"]
    assert req.requirements({"CUDA_VERSION": "garbage"}) == []
    assert req.required_cuda(CUDA_12_8) == "12.8"
    assert req.required_cuda("brand=tesla,driver>=470") is None
