"""Decentralised DAPO's gossip: socket-free selection, queueing, mixing and
fingerprints (`core`), compression of what travels (`compress`), a peer's node
(`node`) and its two ways of mixing in rounds (`round_mix`, `grad_mix`)."""
