"""Timing-table interpolation: exact at grid points, linear between, the stated rule off
the grid, and refusal of impossible tables."""

import pytest

from kvsim.physics.timing import TimingTable

GRID = TimingTable([1000, 2000, 4000], [0, 1000], [[1.0, 2.0], [2.0, 4.0], [5.0, 9.0]])


@pytest.mark.parametrize(
    ("new", "cached", "t"),
    [
        (1000, 0, 1.0),
        (2000, 1000, 4.0),
        (4000, 0, 5.0),
        (4000, 1000, 9.0),
    ],
)
def test_exact_at_grid_points(new, cached, t):
    assert GRID(new, cached) == pytest.approx(t)


@pytest.mark.parametrize(
    ("new", "cached", "t"),
    [
        (1500, 0, 1.5),  # halfway along new
        (2000, 500, 3.0),  # halfway along cached
        (3000, 500, (3.0 + 7.0) / 2),  # bilinear: rows at 2000 (3.0) and 4000 (7.0)
    ],
)
def test_linear_between_grid_points(new, cached, t):
    assert GRID(new, cached) == pytest.approx(t)


def test_off_the_grid():
    # below the first point the first value holds
    assert GRID(10, 0) == pytest.approx(1.0)
    # above the last point, the last segment's slope continues (5->9 over 1000 cached)
    assert GRID(4000, 2000) == pytest.approx(13.0)
    # and along new: (2000->4000 gives +3 s at cached 0) so 6000 -> 8.0
    before = GRID.extrapolations
    assert GRID(6000, 0) == pytest.approx(8.0)
    assert GRID.extrapolations == before + 1


def test_scale_and_throughput():
    t = TimingTable([1000, 2000], [0], [[1.0], [2.0]], scale=0.5)
    assert t(2000, 0) == pytest.approx(1.0)
    assert t.throughput(2000) == pytest.approx(2000.0)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([2, 1], [0], [[1.0], [2.0]]), "strictly increasing"),
        (([1, 2], [0], [[2.0], [1.0]]), "must not decrease"),
        (([1, 2], [0, 5], [[1.0, 0.5], [2.0, 3.0]]), "must not decrease"),
        (([1, 2], [0], [[1.0]]), "shape"),
        (([1], [0], [[0.0]]), "> 0"),
    ],
)
def test_refuses_impossible_tables(args, match):
    with pytest.raises(ValueError, match=match):
        TimingTable(*args)
