"""Communication between roles: ZeroMQ sockets and CURVE (`transport`), sending
and receiving wire messages with counters (`messaging`), and the versions a
member announces (`versions`). The wire format itself is `verl_zmq.wire`."""
