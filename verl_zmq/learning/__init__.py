"""What a learner (or gossip peer) runs besides its role shell: the feeds that
bring it batches from its group's replay shards, the trainer that updates and
checkpoints, and a peer's gossip node. Nothing here knows of the registry."""
