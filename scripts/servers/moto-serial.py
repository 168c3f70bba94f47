"""moto's S3 server, answering one request at a time.

moto checks a PUT's If-Match / If-None-Match and then writes the object, in two
steps, on a threaded server: two conditional PUTs made from the same version
can both pass the check. Under load that grants a lease twice (the counter
torture test saw two holders with one token). S3, GCS, Azure and Ceph RGW decide
a conditional write atomically; serialising moto's requests gives it the same
property, so the tests judge tenure and not the emulator's race.

Usage: moto-serial.py HOST PORT
"""

import os
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def serial(environ, start_response):
        with one_at_a_time:
            body = app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close:
                    close()

    run_simple(host, port, serial, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
