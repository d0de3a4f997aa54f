"""Redis deployments the suite starts itself: a Cluster, a Sentinel set, a TLS server.

Each binds 127.0.0.1 on free ports, keeps its files in a temporary directory, and stops
every process it started when closed.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from .servers import RedisServer, free_port, require_redis_server, stop_process


def is_master(port: int) -> bool:
    with redis.Redis(port=port) as client:
        return bool(client.info("replication")["role"] == "master")


def _in_sync(replica: int, offset: int = 0) -> bool:
    """Whether ``replica`` is linked to its master and has its stream up to ``offset``."""
    with redis.Redis(port=replica) as client:
        info = client.info("replication")
    return bool(
        info["role"] == "slave"
        and info["master_link_status"] == "up"
        and not info["master_sync_in_progress"]
        and int(info["slave_repl_offset"]) >= offset
    )


def _wait(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Cluster:
    """A Redis Cluster of ``masters`` masters, each with ``replicas`` replicas."""

    def __init__(self, masters: int = 3, replicas: int = 1) -> None:
        require_redis_server()
        self.servers: list[RedisServer] = []
        args = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"]
        try:
            for _ in range(masters * (1 + replicas)):
                port = free_port(cluster=True)
                conf = f"nodes-{port}.conf"
                server = RedisServer(*args, "--cluster-config-file", conf, port=port)
                server.start()
                self.servers.append(server)
            addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
            subprocess.run(
                ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas",
                 str(replicas), "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            for server in self.servers:
                _wait(lambda s=server: self._state_ok(s.port), 30, "the cluster")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _state_ok(port: int) -> bool:
        with redis.Redis(port=port) as client:
            info = client.execute_command("CLUSTER", "INFO").decode()
            return "cluster_state:ok" in info and "cluster_slots_ok:16384" in info

    @property
    def url(self) -> str:
        nodes = ",".join(f"127.0.0.1:{s.port}" for s in self.servers[:2])
        return f"redis+cluster://{nodes}/"

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.servers[0].port)

    def master_of(self, key: str) -> int:
        with self.client() as client:
            node = client.get_node_from_key(key)
            assert node is not None
            return int(node.port)

    def replica_of(self, master_port: int) -> int:
        with redis.Redis(port=master_port) as client:
            info = client.info("replication")
        return int(info["slave0"]["port"])

    def failover(self, key: str) -> tuple[int, int]:
        """Promote the replica of the master serving ``key``: (old master, new master)."""
        old = self.master_of(key)
        new = self.replica_of(old)
        for attempt in range(3):
            # A manual failover gives up quietly when the replica cannot catch up with
            # its paused master in time (a busy machine): ask again.
            with redis.Redis(port=new) as client:
                client.execute_command("CLUSTER", "FAILOVER")
            try:
                _wait(lambda: is_master(new), 10, "the replica's promotion")
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        _wait(lambda: self.master_of(key) == new, 30, "the new slot map")
        return old, new

    def close(self) -> None:
        for server in self.servers:
            server.close()
        self.servers = []

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SentinelSet:
    """A master, one replica and three sentinels watching them (service ``mymaster``)."""

    service = "mymaster"

    def __init__(self) -> None:
        binary = require_redis_server()
        self.master = RedisServer("--repl-diskless-sync-delay", "0")
        self.replica: RedisServer | None = None
        self.sentinels: list[subprocess.Popen[bytes]] = []
        self.sentinel_ports: list[int] = []
        self.dir = Path(tempfile.mkdtemp(prefix="trunner-sentinel-"))
        try:
            self.master.start()
            self.replica = replica = RedisServer("--replicaof", "127.0.0.1", str(self.master.port))
            replica.start()
            # The replica holds nothing until its first full sync, which a master delays
            # by repl-diskless-sync-delay (5 s): a failover before it promotes an empty
            # server, and everything written so far is gone.
            _wait(lambda: _in_sync(replica.port), 30, "the replica's first sync")
            for _ in range(3):
                port = free_port()
                config = self.dir / f"sentinel-{port}.conf"
                config.write_text(
                    f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                    f"sentinel monitor {self.service} 127.0.0.1 {self.master.port} 2\n"
                    f"sentinel down-after-milliseconds {self.service} 1000\n"
                    f"sentinel failover-timeout {self.service} 5000\n"
                )
                self.sentinels.append(
                    subprocess.Popen(
                        [binary, str(config), "--sentinel"],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                self.sentinel_ports.append(port)
            for port in self.sentinel_ports:
                _wait(lambda p=port: self._knows_replica(p), 30, "the sentinels")
        except BaseException:
            self.close()
            raise

    def _knows_replica(self, port: int) -> bool:
        with redis.Redis(port=port) as client:
            replicas = client.execute_command("SENTINEL", "REPLICAS", self.service)
            return bool(replicas)

    def master_port(self) -> int:
        with redis.Redis(port=self.sentinel_ports[0]) as client:
            _, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
            return int(port)

    @property
    def url(self) -> str:
        nodes = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{nodes}/{self.service}/0"

    def replica_port(self) -> int:
        assert self.replica is not None
        master = self.master_port()
        return self.master.port if self.replica.port == master else self.replica.port

    def failover(self, *, coordinated: bool = True) -> tuple[int, int]:
        """A planned failover, which loses no acknowledged write: (old master, new master).

        ``SENTINEL FAILOVER`` alone is not one. It promotes the replica without stopping
        the master, which goes on acknowledging writes until the sentinels reconfigure it
        about ten seconds later, and then discards them to copy the new master (and a
        replica that is behind is promoted all the same). So this does what Redis's own
        coordinated ``FAILOVER`` command does, with the sentinels choosing the new master:
        pause writes on the master, wait until the replica has everything, have the
        sentinels promote it, make the old master its replica, and let writes resume.
        Writes that waited in the pause then fail (READONLY), unacknowledged, and clients
        send them again to the new master.

        ``coordinated=False``: the bare ``SENTINEL FAILOVER`` (once the replica has caught
        up), which leaves the old master a writable master for those ten seconds.
        """
        old, new = self.master_port(), self.replica_port()
        with redis.Redis(port=old) as master:
            if coordinated:
                master.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
            try:
                offset = int(master.info("replication")["master_repl_offset"])
                _wait(lambda: _in_sync(new, offset), 30, "the replica to catch up")
                with redis.Redis(port=self.sentinel_ports[0]) as client:
                    # NOGOODSLAVE until the sentinel has the replica's latest INFO: ask again
                    _wait(lambda: client.sentinel_failover(self.service), 30, "the failover")
                _wait(lambda: self.master_port() == new, 30, "the sentinel failover")
                _wait(lambda: is_master(new), 30, "the new master")
                if coordinated:
                    master.execute_command("REPLICAOF", "127.0.0.1", new)
            finally:
                if coordinated:
                    master.execute_command("CLIENT", "UNPAUSE")
        return old, new

    def close(self) -> None:
        for process in self.sentinels:
            stop_process(process)
        self.sentinels = []
        for server in (self.replica, self.master):
            if server is not None:
                server.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SentinelSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TlsServer:
    """A redis-server speaking only TLS, with a CA and certificates made for the test."""

    def __init__(self) -> None:
        require_redis_server()
        self.dir = Path(tempfile.mkdtemp(prefix="trunner-tls-"))
        d = self.dir

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

        openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(d / "ca.key"),
            "-out",
            str(d / "ca.crt"),
            "-days",
            "1",
            "-subj",
            "/CN=trunner-test-ca",
        )
        (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        for name in ("server", "client"):
            openssl(
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(d / f"{name}.key"),
                "-out",
                str(d / f"{name}.csr"),
                "-subj",
                f"/CN={name}",
            )
            openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"),
                    "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-out", str(d / f"{name}.crt"),
                    "-days", "1", "-extfile", str(d / "ext.cnf"))  # fmt: skip
        self.port = free_port()
        self.server = RedisServer(
            "--port", "0", "--tls-port", str(self.port),
            "--tls-cert-file", str(d / "server.crt"), "--tls-key-file", str(d / "server.key"),
            "--tls-ca-cert-file", str(d / "ca.crt"), "--tls-auth-clients", "yes",
            port=self.port,
        )  # fmt: skip
        try:
            self.server.start(tls=self.tls_kwargs())
        except BaseException:
            self.close()
            raise

    def tls_kwargs(self) -> dict[str, str]:
        return {
            "ssl_ca_certs": str(self.dir / "ca.crt"),
            "ssl_certfile": str(self.dir / "client.crt"),
            "ssl_keyfile": str(self.dir / "client.key"),
        }

    @property
    def url(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.tls_kwargs().items())
        return f"rediss://127.0.0.1:{self.port}/0?{query}"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, ssl=True, **self.tls_kwargs())  # type: ignore[arg-type]

    def close(self) -> None:
        self.server.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> TlsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
