"""Training: the LightningModule and what one RL step needs beside it.

- :mod:`lite_ppo.training.module`: ``LitePPO``, the policy and the PPO update.
- :mod:`lite_ppo.training.policy_forward`: the policy's forward over a rollout batch (micro-batches, packing).
- :mod:`lite_ppo.training.schedule`: the optimizer steps a fit plans and the learning-rate schedule.
- :mod:`lite_ppo.training.preflight`: settings refused at fit start, before any weights load.
- :mod:`lite_ppo.training.resume`: what may change when a run resumes from a checkpoint.
- :mod:`lite_ppo.training.checkpoint_contents`: what a checkpoint holds beside Lightning's state.

The technique contract the module calls is :mod:`lite_ppo.technique`; a step's scalars go through
:mod:`lite_ppo.step_metrics`.
"""
