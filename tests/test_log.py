"""A role's log on a disk that fills and then has room again: nothing raises, the
lines go to stderr while it is full, and to the log again once it takes them."""

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
    assert lines == ['{"n": 1}', '{"n": 5}']
