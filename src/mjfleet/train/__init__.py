"""One training job end to end: resolved from the flags (`job`), run by every worker (`worker`), checkpointed
(`checkpoint`), or joined to an external launcher such as torchrun (`external`). Below `cli`, above `rl`."""
