"""The one context rule (rollout.context): the settings check at start and each step's prompt limit use it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lite_ppo.rollout.context import ContextLimit, context_limit, model_context


@pytest.mark.parametrize(
    ("config", "engine", "expected"),
    [
        ({"max_position_embeddings": 2048}, None, ContextLimit(2048, "max_position_embeddings")),
        ({"n_positions": 1024}, None, ContextLimit(1024, "max_position_embeddings")),  # GPT-2-style configs
        ({"max_position_embeddings": 2048}, 512, ContextLimit(512, "rollout.engine max_model_len")),
        ({"max_position_embeddings": 512}, 2048, ContextLimit(512, "max_position_embeddings")),  # the smaller
        ({}, 4096, ContextLimit(4096, "rollout.engine max_model_len")),
        ({}, None, None),
        ({"max_position_embeddings": 0, "n_positions": 300}, 0, ContextLimit(300, "max_position_embeddings")),
        ({"max_position_embeddings": True}, None, None),  # not a length
    ],
)
def test_the_context_is_the_smaller_of_the_model_and_the_engine(config, engine, expected):
    engine = SimpleNamespace(max_model_len=engine) if engine is not None else SimpleNamespace()
    assert context_limit(SimpleNamespace(**config), engine) == expected


def test_the_step_and_the_start_check_share_the_rule(tiny_model_path):
    """The producer's prompt limit is the shared context minus the response budget, for the real tiny
    model's config, with and without an engine that bounds it."""
    from transformers import AutoConfig

    from lite_ppo.rollout.engine import SamplingConfig
    from lite_ppo.rollout.producer import RolloutProducer
    from lite_ppo.training.preflight import model_context_length

    config = AutoConfig.from_pretrained(tiny_model_path)
    assert model_context_length(str(tiny_model_path)) == model_context(config) == config.max_position_embeddings
    source = SimpleNamespace(policy=SimpleNamespace(config=config))
    sampling = SamplingConfig(max_new_tokens=48)
    for max_model_len in (None, 300):
        producer = RolloutProducer.__new__(RolloutProducer)  # only the prompt-limit state
        producer.max_prompt_tokens = None
        producer.engine = SimpleNamespace(max_model_len=max_model_len)
        expected = (max_model_len or config.max_position_embeddings) - 48
        assert producer.prompt_token_limit(source, sampling) == expected
