"""Mirrors tensorrt_llm/_common.py check_max_num_tokens (stored version; builder.py::build calls it in 1.2.1)."""

from ._stand_in import warn


def check_max_num_tokens(max_num_tokens, opt_num_tokens, max_batch_size, max_input_len, max_seq_len, max_beam_width,
                         remove_input_padding, enable_context_fmha, tokens_per_block, multiple_profiles):
    if not remove_input_padding:
        if max_num_tokens is not None or opt_num_tokens is not None:
            max_num_tokens = max_batch_size * max_seq_len
        return max_num_tokens, opt_num_tokens
    if max_num_tokens is None:
        max_num_tokens = max_seq_len * max_batch_size
    if opt_num_tokens is None and not multiple_profiles:
        opt_num_tokens = min(max_batch_size * max_beam_width, max_num_tokens)
    if max_num_tokens > max_seq_len * max_batch_size:
        warn(f"max_num_tokens ({max_num_tokens}) shouldn't be greater than max_seq_len * max_batch_size "
             f"({max_seq_len * max_batch_size}), specifying to max_seq_len * max_batch_size ({max_seq_len * max_batch_size}).")
        max_num_tokens = max_seq_len * max_batch_size
    if max_num_tokens < max_input_len and not enable_context_fmha:
        max_num_tokens = max_input_len
    elif max_num_tokens < tokens_per_block and enable_context_fmha:
        max_num_tokens = tokens_per_block
    if opt_num_tokens is not None and opt_num_tokens > max_num_tokens:
        opt_num_tokens = max_num_tokens
    return max_num_tokens, opt_num_tokens
