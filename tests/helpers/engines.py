"""A rollout engine that answers from a script: evaluation and rollout tests without a model."""

from __future__ import annotations

from lite_ppo.rollout.engine import Generation, RolloutEngine


class ScriptedEngine(RolloutEngine):
    """Returns fixed response texts (tokenized) per prompt: [(text, finished), ...] for each prompt."""

    def __init__(self, script):
        self.script = script

    def setup(self, policy, tokenizer, model_path):
        self.tokenizer = tokenizer

    @property
    def shares_policy_weights(self):
        return True

    def generate(self, prompt_token_ids, sampling, seed=None):
        out = []
        for responses in self.script[: len(prompt_token_ids)]:
            group = []
            for text, finished in responses:
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                group.append(Generation(ids + [self.tokenizer.eos_token_id] if finished else ids, finished))
            out.append(group)
        self.script = self.script[len(prompt_token_ids) :]
        return out
