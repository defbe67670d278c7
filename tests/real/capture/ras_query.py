"""Ask NCCL's RAS service on localhost:28028 for the job's status, in the ways its versions answer; print each."""

import socket
import sys


def talk(lines: list[str], timeout: float = 10.0) -> str:
    out = b""
    try:
        with socket.create_connection(("127.0.0.1", 28028), timeout=timeout) as s:
            s.settimeout(timeout)
            for line in lines:
                s.sendall(line.encode() + b"\n")
                if line.startswith(("CLIENT", "SET", "TIMEOUT")):
                    try:
                        out += s.recv(4096)
                    except TimeoutError:
                        out += b"<no reply>\n"
            while True:
                try:
                    b = s.recv(65536)
                except TimeoutError:
                    out += b"\n<timeout>\n"
                    break
                if not b:
                    break
                out += b
    except OSError as e:
        out += f"<error {e}>".encode()
    return out.decode(errors="replace")


for name, seq in (
    ("plain STATUS", ["STATUS"]),
    ("protocol 2, VERBOSE STATUS", ["CLIENT PROTOCOL 2", "VERBOSE STATUS"]),
    ("protocol 2, json STATUS", ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"]),
):
    print(f"===== {name}: {seq}", flush=True)
    print(talk(seq), flush=True)
sys.exit(0)
