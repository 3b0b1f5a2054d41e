"""The ``hf`` rollout backend (piece 4 of `dara.verl_plugin.cpu_backend`): a transformers model served from a Ray
actor (`HFServer`, launched by `HFReplica`, verl's ``RolloutReplica`` interface), fed the actor's weights through
verl's colocated weight sync (`HFServerAdapter.update_weights`) before every rollout."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

import torch

from dara.devices import check_device, torch_device
from dara.verl_plugin.cpu import ROLLOUT_NAME

logger = logging.getLogger(__name__)


def _get(config, key: str, default=None):
    if config is None:
        return default
    if hasattr(config, "get"):
        try:
            return config.get(key, default)
        except Exception:  # a dataclass whose get() has another signature
            pass
    return getattr(config, key, default)


def sampling_config(temperature: float, top_p: float, top_k: int, max_new_tokens: int, eos_token_ids, pad_token_id):
    """The Hugging Face ``GenerationConfig`` of verl's sampling parameters (vLLM's conventions: temperature 0 is greedy,
    top_k <= 0 and top_p 1 mean no truncation). Transformers fills a top_k left unset with 50, which would sample from a
    truncated distribution while the returned log-probs describe the full one: a disabled top_k is passed as 0."""
    from transformers import GenerationConfig

    greedy = temperature <= 0
    return GenerationConfig(
        do_sample=not greedy, temperature=None if greedy else temperature, top_p=None if greedy else top_p,
        top_k=None if greedy else max(top_k, 0), max_new_tokens=max_new_tokens,
        eos_token_id=eos_token_ids, pad_token_id=pad_token_id, output_logits=True, return_dict_in_generate=True,
    )


def server_name(replica_rank: int) -> str:
    return f"{ROLLOUT_NAME}_server_{replica_rank}"


# The served model's torch dtype on a GPU, by verl's name for it (``actor_rollout_ref.rollout.dtype``, as vLLM reads it).
_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
           "half": torch.float16, "float32": torch.float32, "fp32": torch.float32, "float": torch.float32}


def served_model_settings(device: str, rollout_dtype: str | None) -> dict[str, Any]:
    """How `HFServer` loads its model on ``device`` ("cpu" or "cuda"): on the CPU in float32 with eager attention
    (verl_cpu's actor computes in float32 too, so rollout and actor log-probs agree to float noise); on a GPU in the
    rollout's dtype (verl's default bfloat16, the actor's FSDP parameter dtype) with PyTorch's SDPA attention
    (flash_attention_2, verl's default, needs the flash-attn package)."""
    if check_device(device) == "cpu":
        return {"dtype": torch.float32, "attn_implementation": "eager"}
    name = str(rollout_dtype or "bfloat16").lower().removeprefix("torch.")
    if name not in _DTYPES:
        raise ValueError(f"the hf rollout does not know dtype {rollout_dtype!r} (actor_rollout_ref.rollout.dtype); "
                         f"known: {', '.join(_DTYPES)}")
    return {"dtype": _DTYPES[name], "attn_implementation": "sdpa"}


# Static batching of concurrent requests: a batch closes when it holds MAX_BATCH requests, when no request has arrived
# for BATCH_SETTLE_S, or BATCH_WINDOW_S after its first request. verl's agent loop sends a step's prompts together,
# so they arrive within milliseconds; a tiny model's generate costs about as much for 64 rows as for one.
MAX_BATCH_VARIABLE = "DARA_HF_ROLLOUT_MAX_BATCH"  # 1: one request at a time (the unbatched path, for benchmarks)
DEFAULT_MAX_BATCH = 256
BATCH_SETTLE_S = 0.01
BATCH_WINDOW_S = 0.1


@dataclass(frozen=True)
class _Request:
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    logprobs: bool

    @property
    def sampling(self) -> tuple[float, float, int]:
        """Requests that share these are generated in one batch."""
        return self.temperature, self.top_p, self.top_k


class HFServer:
    """A Ray actor serving a transformers causal LM with verl's token-in-token-out ``generate`` interface.

    Requests that arrive together are generated as one left-padded batch (`MAX_BATCH_VARIABLE` caps the batch; 1
    serves them one at a time), one batch at a time (a lock; the machine has few cores), its rows in the order of
    their prompts rather than of their arrival, so that a rerun hands a batch's random draws to the same prompts.
    Batching changes which random numbers a request's tokens are drawn with, not their distribution: greedy
    requests get the same tokens batched and alone, sampled ones the same distribution (tests/test_hf_rollout.py).
    Log-probs are those of the sampled tokens under ``softmax(logits / temperature)`` of the raw logits, which is
    what verl's actor computes, so ``training/rollout_probs_diff_*`` measures weight staleness and numerics only.

    ``device``: where the model is served, verl's device (`HFReplica` passes it): "cpu", or "cuda" (the current GPU,
    in the rollout's dtype; `served_model_settings`).
    """

    def __init__(self, config, model_config, replica_rank: int = 0, device: str = "cpu"):
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        self.config = config
        path = _get(model_config, "local_path") or _get(model_config, "path")
        if not path or not os.path.isdir(path):
            raise FileNotFoundError(f"the hf rollout needs a local model folder, got {path!r}")
        loading = served_model_settings(device, _get(config, "dtype"))
        self.device = torch_device(device)  # "cuda" where this Ray actor sees no GPU stops here
        self.model = AutoModelForCausalLM.from_pretrained(path, **loading)
        if device != "cpu":
            self.model.to(self.device)
        self.model.eval()
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.model.config.eos_token_id
        self.eos_token_ids = [eos] if isinstance(eos, int) else list(eos or [])
        pad = self.model.generation_config.pad_token_id
        self.pad_token_id = pad if pad is not None else (self.eos_token_ids[0] if self.eos_token_ids else 0)
        self.replica_rank = replica_rank
        self.global_steps = None
        self.weight_loads = 0
        self._lock = threading.Lock()
        seed = _get(config, "seed", 0)
        self._generator_seed = int(seed if seed is not None else 0)
        torch.manual_seed(self._generator_seed)
        given = os.environ.get(MAX_BATCH_VARIABLE, "").strip()
        if given and not (given.isdigit() and int(given) >= 1):
            raise ValueError(f"{MAX_BATCH_VARIABLE} must be a positive integer, got {given!r}")
        self.max_batch = int(given) if given else DEFAULT_MAX_BATCH
        self._pending: list[tuple[_Request, asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None

    # generation ----------------------------------------------------------------------------------------------

    async def generate(self, prompt_ids, sampling_params: dict, request_id: str, image_data=None, video_data=None,
                       **unused):
        if image_data or video_data:
            raise NotImplementedError("the hf rollout serves text models only")
        request = self._request(list(prompt_ids), dict(sampling_params))
        future = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        return await future

    def _request(self, prompt_ids: list[int], params: dict) -> _Request:
        max_len = int(_get(self.config, "max_model_len", 0) or 0) or int(
            _get(self.config, "prompt_length", 0)) + int(_get(self.config, "response_length", 0))
        max_new = min(int(_get(self.config, "response_length")), max_len - len(prompt_ids))
        if max_new < 1:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens leaves no room within {max_len} tokens")
        return _Request(prompt_ids, max_new, temperature=float(params.get("temperature", 1.0) or 0.0),
                        top_p=float(params.get("top_p", 1.0) or 1.0), top_k=int(params.get("top_k", -1) or -1),
                        logprobs=bool(params.get("logprobs")))

    async def _drain(self):
        """Generate the pending requests, a batch at a time, until none is left."""
        while self._pending:
            loop = asyncio.get_running_loop()
            opened = loop.time()
            seen = len(self._pending)
            while len(self._pending) < self.max_batch and loop.time() - opened < BATCH_WINDOW_S:
                await asyncio.sleep(BATCH_SETTLE_S)
                if len(self._pending) == seen:
                    break
                seen = len(self._pending)
            taken, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
            # Rows in the order of their prompts, not of their arrival (which follows Ray's timing): a batch's
            # random draws go to the same prompts on every run (copies of one prompt stay interchangeable).
            taken.sort(key=lambda pending: pending[0].prompt_ids)
            groups: dict[tuple, list[tuple[_Request, asyncio.Future]]] = {}
            for request, future in taken:
                groups.setdefault(request.sampling, []).append((request, future))
            for group in groups.values():
                try:
                    outputs = await asyncio.to_thread(self._generate_batch, [request for request, _ in group])
                except Exception as error:  # every request of the batch fails with it
                    for _, future in group:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for (_, future), output in zip(group, outputs):
                    if not future.done():
                        future.set_result(output)

    @torch.no_grad()
    def _generate_batch(self, requests: list[_Request]):
        """One left-padded ``generate`` over requests that share their sampling parameters; each row is cut at its
        own length cap and first EOS (kept, as vLLM returns it)."""
        from verl.workers.rollout.replica import TokenOutput

        temperature, top_p, top_k = requests[0].sampling
        greedy = temperature <= 0
        width = max(len(request.prompt_ids) for request in requests)
        ids = torch.full((len(requests), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(requests), width), dtype=torch.long)
        for row, request in enumerate(requests):
            ids[row, width - len(request.prompt_ids):] = torch.tensor(request.prompt_ids, dtype=torch.long)
            attention[row, width - len(request.prompt_ids):] = 1
        max_new = max(request.max_new_tokens for request in requests)
        generation = sampling_config(temperature, top_p, top_k, max_new, self.eos_token_ids or None, self.pad_token_id)
        with self._lock:
            out = self.model.generate(input_ids=ids.to(self.device), attention_mask=attention.to(self.device),
                                      generation_config=generation)
        logits_all = torch.stack(out.logits, dim=1).float()
        outputs = []
        for row, request in enumerate(requests):
            tokens = out.sequences[row, width:].tolist()[: request.max_new_tokens]
            for position, token in enumerate(tokens):
                if token in self.eos_token_ids:
                    tokens = tokens[: position + 1]
                    break
            logits = logits_all[row, : len(tokens)]
            scaled = logits if greedy else logits / temperature
            chosen = torch.tensor(tokens, device=scaled.device).unsqueeze(-1)
            log_probs = torch.log_softmax(scaled, dim=-1).gather(-1, chosen).squeeze(-1)
            outputs.append(TokenOutput(token_ids=tokens, log_probs=log_probs.tolist() if request.logprobs else None,
                                       stop_reason="completed", extra_fields={"global_steps": self.global_steps}))
        return outputs

    # weights -------------------------------------------------------------------------------------------------

    def load_weights(self, state: dict[str, torch.Tensor], global_steps=None) -> dict[str, Any]:
        """Copy the actor's parameters (Hugging Face names) into the served model; every parameter must arrive."""
        with self._lock:
            own = dict(self.model.named_parameters())
            unknown = sorted(set(state) - set(self.model.state_dict()))
            if unknown:
                raise KeyError(f"the actor sent weights the rollout model lacks: {unknown[:5]}")
            tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
            missing = sorted(set(own) - set(state) - tied)
            if missing:
                raise KeyError(f"the actor's weights lack rollout parameters {missing[:5]}")
            self.model.load_state_dict(state, strict=False)
            if tied and "lm_head.weight" not in state:
                self.model.tie_weights()
            self.weight_loads += 1
            if global_steps is not None:
                self.global_steps = global_steps
        return self.weight_info()

    def weight_info(self) -> dict[str, Any]:
        """How often weights arrived and a checksum of the served parameters (the adapter logs it after each sync)."""
        total = sum(float(p.detach().double().sum()) for p in self.model.parameters())
        return {"weight_loads": self.weight_loads, "param_checksum": total, "global_steps": self.global_steps}

    def set_global_steps(self, global_steps) -> None:
        self.global_steps = global_steps

    # verl's server controls: the model stays where it was loaded (a tiny model beside the actor), so there is
    # nothing to free or restore -------------------------------------------------------------------------------

    async def wake_up(self, tags=None):
        return None

    async def sleep(self):
        return None

    async def clear_kv_cache(self):
        return None

    async def release_kv_cache(self):
        return None

    async def resume_kv_cache(self):
        return None

    async def wait_for_requests_to_drain(self):
        return None

    async def abort_all_requests(self, reject_request: bool = False):
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self):
        return None

    async def start_profile(self, **kwargs):
        return None

    async def stop_profile(self):
        return None


def rollout_device() -> str:
    """Where the hf rollout serves: verl's device in this process (``cpu`` on the CPU platform, VERL_PLATFORM=cpu;
    ``cuda`` on NVIDIA's)."""
    from verl.utils.device import get_device_name

    return get_device_name()


def _rollout_classes():
    import ray
    from verl.workers.rollout.base import BaseRollout
    from verl.workers.rollout.replica import RolloutReplica

    class HFReplica(RolloutReplica):
        """One `HFServer` per replica (world size 1: tensor/pipeline/data parallel sizes must be 1)."""

        async def launch_servers(self):
            if self.world_size != 1:
                raise ValueError(f"the hf rollout runs one process per replica; got world size {self.world_size}")
            name = server_name(self.replica_rank) + self.name_suffix
            # No Ray GPU for the server: verl's placement group holds the node's GPUs for the training workers; a
            # zero-GPU actor keeps the GPUs its node shows (Ray leaves CUDA_VISIBLE_DEVICES alone), and shares them.
            server = ray.remote(HFServer).options(name=name, num_cpus=0, max_concurrency=self.max_concurrency).remote(
                config=self.config, model_config=self.model_config, replica_rank=self.replica_rank,
                device=rollout_device())
            await server.set_global_steps.remote(None)  # waits until the model is loaded
            self.servers = [server]
            self._server_handle = server
            self._server_address = name  # the load balancer keys servers by this string; no HTTP here

    class HFServerAdapter(BaseRollout):
        """The training worker's side of the hf rollout: hands the FSDP model's weights to `HFServer`."""

        def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
            super().__init__(config, model_config, device_mesh)
            rank = int(os.environ.get("RANK", "0"))
            world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                     * self.config.pipeline_model_parallel_size)
            self.replica_rank = rank // world if replica_rank == -1 else replica_rank
            self._has_server = rank % world == 0
            self._server = None

        def _handle(self):
            if self._server is None:
                self._server = ray.get_actor(server_name(self.replica_rank))
            return self._server

        async def resume(self, tags: list[str]):
            return None  # the served model is never offloaded: nothing to bring back

        async def release(self):
            return None

        @torch.no_grad()
        async def update_weights(self, weights, global_steps: int | None = None, wire_format: str = "named_tensors",
                                 peft_config=None, **unused):
            from verl.workers.rollout.utils import ensure_async_iterator

            if wire_format != "named_tensors":
                raise NotImplementedError(f"the hf rollout takes full tensors, not {wire_format!r}")
            if peft_config is not None:
                raise NotImplementedError("the hf rollout does not serve LoRA adapters; merge them (lora.merge)")
            state = {}
            async for name, tensor in ensure_async_iterator(weights):
                if hasattr(tensor, "full_tensor"):
                    tensor = tensor.full_tensor()
                state[name] = tensor.detach().to("cpu", copy=True)
            if self._has_server:
                info = await self._handle().load_weights.remote(state, global_steps)
                logger.info("hf rollout: weights loaded (%s)", info)

    return HFReplica, HFServerAdapter


def __getattr__(name: str):
    # verl resolves rollout classes by dotted name (verl.workers.rollout.base._ROLLOUT_REGISTRY); build them lazily
    if name in ("HFReplica", "HFServerAdapter"):
        replica, adapter = _rollout_classes()
        globals().update(HFReplica=replica, HFServerAdapter=adapter)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_rollout() -> None:
    from verl.workers.rollout import base, replica

    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.HFServerAdapter"
    replica.RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: __getattr__("HFReplica"))
