"""A role's log on a disk that fills and then has room again: nothing raises, the
lines go to stderr while it is full, and to the log again once it takes them,
those it refused first."""

from __future__ import annotations

import errno
import io

from verl_zmq.log import SafeStream


class FullThenFree(io.StringIO):
    """A stream whose writes fail with ENOSPC while `full`."""

    full = False

    def write(self, text: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(text)


def test_a_log_that_fills_goes_to_stderr_then_back_to_the_log(capsys):
    stream = FullThenFree()
    log = SafeStream(stream)
    log.write('{"n": 1}\n')
    stream.full = True
    log.write('{"n": 2}\n')  # fails: said on stderr, the line with it
    log.write('{"n": 3}\n')
    err = capsys.readouterr().err
    assert "cannot write the log" in err and "ENOSPC" in err and '{"n": 3}' in err
    stream.full = False
    log.write('{"n": 4}\n')  # before the retry time: still stderr
    assert '{"n": 4}' in capsys.readouterr().err
    log.retry_at = 0.0  # the retry is due
    log.write('{"n": 5}\n')
    assert "writable again" in capsys.readouterr().err
    lines = [x for x in stream.getvalue().splitlines() if x]
    assert lines == [f'{{"n": {i}}}' for i in range(1, 6)]  # none lost, in order


def test_a_log_full_for_long_keeps_its_newest_lines_and_counts_the_rest(capsys):
    stream = FullThenFree()
    log = SafeStream(stream)
    log.BACKLOG = 100
    stream.full = True
    for i in range(50):
        log.write(f'{{"n": {i:02d}}}\n')  # 10 characters each
    stream.full = False
    log.retry_at = 0.0
    log.write('{"n": 50}\n')
    assert "401 bytes dropped" in capsys.readouterr().err  # 39 lines and the first, "\n"-led
    lines = [x for x in stream.getvalue().splitlines() if x]
    assert lines == [f'{{"n": {i:02d}}}' for i in range(40, 51)]
    assert log.kept_bytes == 0 and not log.kept


def test_a_remote_roles_relayed_log_survives_a_full_disk(tmp_path):
    """The launcher's relay of a role's output (over SSH): a full disk drops lines,
    counted and said once; once the file takes lines again a `log_gap` line says
    what was lost and the role's lines go on."""
    import asyncio
    import json

    from launcher.relay import LogRelay

    real, link = tmp_path / "sampler-0.jsonl", tmp_path / "log"
    real.touch()
    link.symlink_to(real)
    errors, backs = [], []
    relay = LogRelay(link, "sampler-0", lambda p, e: errors.append(e.errno),
                     lambda p, n: backs.append(n))
    relay.RETRY_S = 0.0
    full = [b'{"n": 2}\n', b'{"n": 3}\n']

    async def feed():
        reader = asyncio.StreamReader()
        task = asyncio.create_task(relay.run(reader))
        reader.feed_data(b'{"n": 1}\n')
        await asyncio.sleep(0)
        link.unlink()
        link.symlink_to("/dev/full")  # every write: ENOSPC
        for chunk in full:
            reader.feed_data(chunk)
            await asyncio.sleep(0)
        link.unlink()
        link.symlink_to(real)
        reader.feed_data(b'{"n": 4}\n')
        reader.feed_eof()
        await task

    asyncio.run(feed())
    assert errors == [errno.ENOSPC]  # said once, not per line
    assert backs == [sum(map(len, full))]
    lines = [json.loads(x) for x in real.read_text().splitlines() if x]
    assert [x.get("n") for x in lines] == [1, None, 4]
    assert lines[1]["event"] == "log_gap" and lines[1]["bytes_lost"] == backs[0]


def test_a_log_file_refused_by_the_disk_gets_every_line_once_when_it_has_room(tmp_path):
    """A real file descriptor whose writes fail (it is pointed at /dev/full, as a
    full disk refuses writes) and then succeed: each line lands once, in order
    (a buffered stream would have held the failed line and written it twice)."""
    import os

    path = tmp_path / "role.jsonl"
    stream = open(path, "a")  # noqa: SIM115 (the log's lifetime is the test's)
    log = SafeStream(stream)
    assert log.fd == stream.fileno()
    log.write('{"n": 1}\n')
    full = os.open("/dev/full", os.O_WRONLY)
    saved = os.dup(log.fd)
    os.dup2(full, log.fd)
    for i in (2, 3):
        log.write(f'{{"n": {i}}}\n')
    log.retry_at = 0.0
    log.write('{"n": 4}\n')  # the retry fails: kept as well
    os.dup2(saved, log.fd)
    log.retry_at = 0.0
    log.write('{"n": 5}\n')
    stream.close()
    os.close(full)
    os.close(saved)
    assert path.read_text() == "".join(f'{{"n": {i}}}\n' for i in range(1, 6))
