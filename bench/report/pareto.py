"""The interactivity-vs-throughput front: which configurations no other beats on both axes.

A point is (output tok/s per user, output tok/s per GPU), bench.metrics'
`output_throughput_per_user` and `output_throughput_per_gpu`. A point is on the Pareto front
when no other point is at least as good on both axes and better on one (both are
higher-is-better). Pure functions, no plotting.
"""

from __future__ import annotations

from collections.abc import Sequence


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Return the indices of the non-dominated points, ordered by ascending x (None / NaN points never count).

    Sorted by x descending (ties: y descending), a point is on the front when its y beats every
    y seen before it; equal points are both kept.
    """
    valid = [i for i, (x, y) in enumerate(points)
             if x is not None and y is not None and x == x and y == y]  # x == x: not NaN
    order = sorted(valid, key=lambda i: (-points[i][0], -points[i][1]))
    front, best_y, last = [], float("-inf"), None
    for i in order:
        x, y = points[i]
        if y > best_y or (last is not None and (x, y) == points[last]):
            front.append(i)
            best_y, last = max(best_y, y), i
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))
