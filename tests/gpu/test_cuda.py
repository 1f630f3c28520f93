"""NVIDIA's toolkit-to-driver table and its minor-version compatibility rules."""

from __future__ import annotations

import pytest

from gpuprobe.gpu.cuda import (
    MINOR_VERSION_MIN_DRIVER,
    RELEASES,
    Support,
    cuda_version_text,
    minor_version_min_driver,
    newest_supported,
    parse_version,
    release_for,
    support,
)


@pytest.mark.parametrize(
    ("toolkit", "label", "driver"),
    [
        ("12.4", "12.4 GA", (550, 54, 14)),
        ("12.4.1", "12.4 Update 1", (550, 54, 15)),
        ("12.6.2", "12.6 Update 2", (560, 35, 3)),
        ("11.4.4", "11.4 Update 3", (470, 82, 1)),
        ("12.8", "12.8 GA", (570, 26)),
        ("13.0.2", "13.0 Update 2", (580, 95, 5)),
        ("11.0.3", "11.0 Update 1", (450, 51, 6)),
        ("11.0", "11.0 GA", (450, 51, 5)),
        ("11.0.2", "11.0 GA", (450, 51, 5)),
        ("11.1.0", "11.1 GA", (455, 23)),
    ],
)
def test_release_rows(toolkit: str, label: str, driver: tuple[int, ...]) -> None:
    release = release_for(parse_version(toolkit))
    assert release is not None
    assert (release.label, release.min_driver) == (label, driver)


@pytest.mark.parametrize("toolkit", ["13.3", "12.7", "9.2"])
def test_toolkits_the_table_does_not_list_have_no_row(toolkit: str) -> None:
    assert release_for(parse_version(toolkit)) is None


def test_table_is_newest_first_and_drivers_never_decrease() -> None:
    versions = [(*r.version, 0, 0)[:3] for r in RELEASES]
    assert versions == sorted(versions, reverse=True)
    drivers = [r.min_driver for r in RELEASES]
    assert drivers == sorted(drivers, reverse=True)


@pytest.mark.parametrize(
    ("driver", "toolkit", "verdict"),
    [
        ("550.54.15", "12.4.1", Support.FULL),
        ("550.54.14", "12.4.1", Support.MINOR_VERSION_COMPATIBILITY),
        ("535.104.05", "12.8", Support.MINOR_VERSION_COMPATIBILITY),
        ("520.61.05", "12.0", Support.NONE),
        ("575.57.08", "13.0", Support.NONE),
        ("580.65.06", "13.0", Support.FULL),
        ("580.65.06", "13.2", Support.MINOR_VERSION_COMPATIBILITY),
        ("470.82.01", "11.8", Support.MINOR_VERSION_COMPATIBILITY),
        ("440.33", "11.0.3", Support.NONE),
        # Table 2's boundaries: 11.1-11.8 need 450.80.02, 12.x 525.60.13, 11.0 450.36.06.
        ("450.80.02", "11.4", Support.MINOR_VERSION_COMPATIBILITY),
        ("450.80.01", "11.4", Support.NONE),
        ("450.51.06", "11.1", Support.NONE),
        ("525.60.13", "12.2", Support.MINOR_VERSION_COMPATIBILITY),
        ("525.60.12", "12.2", Support.NONE),
        ("450.36.06", "11.0", Support.MINOR_VERSION_COMPATIBILITY),
        ("450.36.05", "11.0", Support.NONE),
        ("450.51.05", "11.0", Support.FULL),
        ("440.33", "10.2", Support.FULL),
        ("418.39", "10.2", Support.NONE),
    ],
)
def test_support(driver: str, toolkit: str, verdict: Support) -> None:
    assert support(parse_version(driver), parse_version(toolkit))[0] is verdict


def test_minor_version_rows_are_newest_first() -> None:
    firsts = [first for first, _ in MINOR_VERSION_MIN_DRIVER]
    assert firsts == sorted(firsts, reverse=True)
    assert minor_version_min_driver((11, 8)) == (450, 80, 2)
    assert minor_version_min_driver((12, 9, 1)) == (525, 60, 13)
    assert minor_version_min_driver((13, 2)) == (580,)
    assert minor_version_min_driver((10, 2)) is None
    assert minor_version_min_driver((14, 0)) is None


def test_a_toolkit_newer_than_the_table_is_judged_by_the_drivers_cuda_version() -> None:
    assert support((600, 1), (13, 3))[0] is Support.UNKNOWN
    assert support((600, 1), (13, 3), (13, 4))[0] is Support.FULL
    assert support((600, 1), (13, 3), (13, 2))[0] is Support.MINOR_VERSION_COMPATIBILITY
    assert support((575, 1), (13, 3), (12, 9))[0] is Support.NONE


def test_newest_supported() -> None:
    newest = newest_supported(parse_version("550.54.15"))
    assert newest is not None and newest.label == "12.4 Update 1"
    assert newest_supported((400,)) is None


def test_cuda_version_text() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(13020) == "13.2"
    assert cuda_version_text(11080) == "11.8"


@pytest.mark.parametrize("bad", ["", "12.", "a.b", "12..4", " "])
def test_parse_version_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_version(bad)
