"""`ray start` for a second node on this machine that joins a loopback-only head (the managed `local` cluster).

Ray turns 127.0.0.1, in `--address` and `--node-ip-address`, into the machine's external address
(`services.resolve_ip_for_localhost`) whenever multi-node mode is on, which a joining node needs; the head then
cannot be reached, because it listens on loopback only. This keeps the addresses as given, so the second node
joins over loopback and listens there too. Tests only: a real second machine joins a head it can reach.

    python loopback_ray_node.py start --address=127.0.0.1:PORT --node-ip-address=127.0.0.1 ...
"""

import sys

import ray._private.services as services

services.resolve_ip_for_localhost = lambda host: host  # the one patch: keep loopback addresses as given

from ray.scripts.scripts import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[0] = "ray"
    sys.exit(main())
