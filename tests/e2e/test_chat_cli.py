"""`kvasir chat` driven through a pseudo-terminal, as a user types: the prompt, a streamed answer
that Ctrl-C stops mid-way (the REPL keeps going), Ctrl-C at the prompt, /clear and /exit."""
import os
import pty
import select
import time

import pytest

from conftest import BIN, GEMMA


class Terminal:
    """The master side of the pty, read through a buffer so that text past a marker is kept."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""

    def write(self, data):
        os.write(self.fd, data)

    def read_until(self, marker, timeout=60):
        """Everything up to and including the next `marker`."""
        deadline = time.time() + timeout
        while marker not in self.buf:
            left = deadline - time.time()
            assert left > 0, f"timed out waiting for {marker!r}; got {self.buf[-400:]!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 4096)
                assert chunk, f"the terminal closed while waiting for {marker!r}"
                self.buf += chunk
        at = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:at], self.buf[at:]
        return out

    def read_some(self, n, timeout=60):
        """At least `n` bytes (whatever has arrived once there are that many)."""
        deadline = time.time() + timeout
        while len(self.buf) < n:
            left = deadline - time.time()
            assert left > 0, f"timed out waiting for {n} bytes; got {self.buf!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 4096)
                assert chunk, "the terminal closed"
                self.buf += chunk
        out, self.buf = self.buf, b""
        return out


@pytest.mark.skipif(not GEMMA.exists(), reason=f"{GEMMA} is not installed (make model)")
def test_chat_repl_streams_interrupts_and_exits():
    # A long answer (no end-of-turn stop, up to 3000 tokens: about a minute here) so that the
    # interrupt lands while it is being written.
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(BIN, [BIN, "chat", "-m", str(GEMMA), "-n", "3000", "--ignore-eos", "--temp", "0", "-c", "4096"])
    term = Terminal(fd)
    try:
        banner = term.read_until(b">>> ")
        assert b"chat template: built-in gemma" in banner
        term.write(b"Tell me a story.\r")
        term.read_until(b"Tell me a story.\r\n")  # the terminal's echo
        # The answer streams: text keeps arriving while it is being written (sizes, not times, so
        # that a slow build, e.g. under AddressSanitizer, passes too).
        first = term.read_some(8)
        more = term.read_some(8)
        assert first and more and b"[stopped]" not in first + more and b">>> " not in first + more
        term.write(b"\x03")  # Ctrl-C: stops this answer, not the program
        rest = term.read_until(b"[stopped]", timeout=20)
        term.read_until(b">>> ", timeout=20)
        assert len(first + more + rest) < 3000 * 4  # nowhere near the full answer
        term.write(b"\x03")  # Ctrl-C at the prompt: a hint, and the prompt again
        assert b"/exit" in term.read_until(b">>> ", timeout=20)
        # ... and it does not stop the next answer before it starts.
        term.write(b"Go on.\r")
        term.read_until(b"Go on.\r\n")
        answer = term.read_some(8)
        assert b"[stopped]" not in answer
        term.write(b"\x03")
        term.read_until(b"[stopped]", timeout=20)
        term.read_until(b">>> ", timeout=20)
        term.write(b"/clear\r")
        assert b"conversation cleared" in term.read_until(b">>> ", timeout=20)
        term.write(b"/exit\r")
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
