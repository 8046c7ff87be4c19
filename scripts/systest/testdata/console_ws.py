# An independent WebSocket client (Debian's python3-websocket) of a node's
# console: logs in on the simulated console and types a line, which the
# node echoes and answers. Usage: console_ws.py URL USER PASSWORD
import base64
import sys
import time

import websocket

url, user, password = sys.argv[1:4]
auth = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
ws = websocket.create_connection(url, header=["Authorization: Basic " + auth], timeout=60)
buf = b""


def until(s, secs=90):
    global buf
    end = time.time() + secs
    while s.encode() not in buf:
        if time.time() > end:
            print("TIMEOUT waiting for %r; got %r" % (s, buf[-400:]))
            sys.exit(1)
        _, data = ws.recv_data()
        if isinstance(data, str):
            data = data.encode()
        buf += data
    buf = buf[buf.index(s.encode()) + len(s):] if s.endswith(": ") else buf


until("Linux version")
until(" login: ")
ws.send_binary(b"root\r")
until("Password: ")
ws.send_binary(b"secret\r")
until("root@")
ws.send_binary(b"echo typed-through-websocket\r")
until("echo typed-through-websocket\r\ntyped-through-websocket\r\n")
print("OK")
ws.close()
