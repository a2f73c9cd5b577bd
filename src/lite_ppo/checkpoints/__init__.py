"""Checkpoints after training: reading them (DeepSpeed ZeRO shards included) and exporting a Hugging Face folder.

- :mod:`lite_ppo.checkpoints.reader`: a checkpoint's policy weights and settings, from a file or a ZeRO folder.
- :mod:`lite_ppo.checkpoints.export`: ``lite-ppo export-hf`` (a merged folder or a LoRA adapter folder).
"""
