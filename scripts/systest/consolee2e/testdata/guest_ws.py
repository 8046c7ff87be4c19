# An independent WebSocket client (Debian's python3-websocket) of a node's
# console whose VM runs drivers/consoletest's guest: it sees the kernel's
# boot messages and the guest's login prompt, then types a line that the
# guest answers ("echo ws''MARK" prints "wsMARK": only the guest removes
# the quotes; the terminal's echo of the typed line keeps them).
# Usage: guest_ws.py URL USER PASSWORD MARK
import base64
import sys
import time

import websocket

url, user, password, mark = sys.argv[1:5]
auth = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
ws = websocket.create_connection(url, header=["Authorization: Basic " + auth], timeout=60)
ws.settimeout(3)
buf = b""
deadline = time.time() + 300


def until(s, poke=None):
    global buf
    while s.encode() not in buf:
        if time.time() > deadline:
            print("TIMEOUT waiting for %r; got %r" % (s, buf[-600:]))
            sys.exit(1)
        try:
            _, data = ws.recv_data()
        except websocket.WebSocketTimeoutException:
            if poke:
                ws.send_binary(poke)
            continue
        if isinstance(data, str):
            data = data.encode()
        buf += data


until("Linux version")
until("bmedge-guest login: ")
line = ("echo ws''%s\r" % mark).encode()
ws.send_binary(line)
until("ws" + mark, poke=line)
print("OK")
ws.close()
