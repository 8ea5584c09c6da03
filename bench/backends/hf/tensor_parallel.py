"""Tensor-parallel loading of the hf backend: transformers' tp_plan over a torchrun job's ranks."""

from __future__ import annotations

import inspect


def load_tensor_parallel(ref, tp: int, kwargs: dict):
    """Return the model sharded over this torchrun job's ranks by transformers' tensor parallelism (tp_plan="auto").

    Each rank (one process per GPU, or per CPU share with gloo) calls this; transformers starts
    the process group from torchrun's environment (nccl on CUDA, gloo on CPU) and each rank
    loads its shards on its own device. A named model has no checkpoint: from_pretrained with
    an empty state dict builds the model from its config and initialises each rank's shards
    with random values, as from_config does for one device.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:  # transformers >= 5.1x: DistributedConfig(tp_plan=...); before that, from_pretrained(tp_plan=...)
        from transformers import DistributedConfig

        use_config = "tp_plan" in inspect.signature(DistributedConfig).parameters
    except ImportError:
        use_config = False
    tp_kwargs = {"distributed_config": DistributedConfig(tp_plan="auto", tp_size=tp)} if use_config else {"tp_plan": "auto"}
    if ref.path:
        return AutoModelForCausalLM.from_pretrained(ref.path, **tp_kwargs, **kwargs)
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.for_model(**ref.config)
    torch.manual_seed(0)
    return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].from_pretrained(None, config=config, state_dict={}, **tp_kwargs, **kwargs)
