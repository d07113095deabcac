"""`gcpo study`, the paper's gap study (Section 2, Appendix D), end to end.

* ``config``: ``StudyConfig`` and the ``PRESETS``;
* ``collect``: G rollouts per query, their rewards, token statistics and exact gradient variance;
* ``run``: ``run_study``, one resumable folder from queries to tables (and ``pilot_gate``);
* ``output``: the tables, figures and run card written from the statistics (``restat``);
* ``lipschitz``: the Lipschitz check of a study folder's Grams (``write_lipschitz``);
* ``from_training``: the study on a training run's tracked groups (``gcpo study --from-training``);
* ``cli``: the `gcpo study` subcommand.
"""

from .config import PRESETS, StudyConfig
from .run import pilot_gate, run_study

__all__ = ["PRESETS", "StudyConfig", "pilot_gate", "run_study"]
