"""Recording episodes from envs into datasets: the layer above the dataset format (:mod:`embodied_gym.data`)
and the env factory (:mod:`embodied_gym.factory`).

- :mod:`.episodes`: :func:`~.episodes.record` rolls any agent's episodes in an env (sim or Real) and
  writes them; :func:`~.episodes.rollout_episode` and :func:`~.episodes.write_episode` are its two steps.
- :mod:`.parallel`: :func:`~.parallel.record_expert_demos`, the scripted expert's episodes rolled out
  in worker processes (or Ray tasks), each building its env with :func:`~embodied_gym.factory.make_env`,
  and written as one dataset in seed order.
"""

from embodied_gym.recording.episodes import RecordingSummary, record
from embodied_gym.recording.parallel import record_expert_demos

__all__ = ["RecordingSummary", "record", "record_expert_demos"]
