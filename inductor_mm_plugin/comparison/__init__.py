"""A/B comparison of the plugin against stock Inductor on the same captured graphs
(``inductor_mm_plugin.compare``).

* ``ab.py``: ``compare`` itself: capture, both arms, numerics, timing, plans;
* ``timing.py``: the arms in interleaved rounds, and sites timed alone;
* ``profile.py``: what the model paid, site by site, from each arm's profiled step;
* ``report.py``: the results, as text, markdown, JSON and a plot.
"""

from .ab import TOLERANCE, compare
from .report import CompareError, Report

__all__ = ["TOLERANCE", "CompareError", "Report", "compare"]
