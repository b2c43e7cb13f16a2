#!/usr/bin/env bash
# TLS from the command line: certificates made with the openssl CLI, the KV
# example's server and client and tools/rpc over tls:// with client
# certificates (--tls-cert, --tls-key, --tls-ca), and the refusals a user
# meets: no client certificate, plaintext against TLS, a key others can read.
# Then the KV example registered in and resolved through an etcd that wants
# TLS with a client certificate and an etcd user (--etcd-*).
set -uo pipefail
server=$(realpath "$1")
client=$(realpath "$2")
rpc=$(realpath "$3")
work=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*" >&2; exit 1; }
umask 077
cd "$work" || exit 1

ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 1 \
  -subj "/CN=test CA" 2>/dev/null || fail "CA"
issue() {  # NAME SAN [SUBJECT]
  openssl req "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "${3:-/CN=$1}" \
    2>/dev/null || fail "request for $1"
  printf 'subjectAltName=%s\n' "$2" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out "$1.pem" -days 1 -extfile "$1.ext" 2>/dev/null || fail "sign $1"
}
issue server "IP:127.0.0.1,DNS:localhost"
issue client "URI:spiffe://test/kv-client"
# etcd's gateway refuses a client certificate with a CommonName once etcd
# users are on: the one for etcd has none.
issue etcd-client "URI:spiffe://test/kv" "/O=kv"

"$server" --uri tls://127.0.0.1:0 --tls-cert server.pem --tls-key server.key \
  --tls-ca ca.pem >server.out 2>server.err &
pid=$!
pids=($pid)
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q 'listening on' server.out && break; sleep 0.1; done
uri=$(sed -n 's/^kv server listening on //p' server.out)
[[ $uri == tls://* ]] || fail "server did not start on tls://: $(cat server.out server.err)"
mtls=(--tls-ca ca.pem --tls-cert client.pem --tls-key client.key)

"$client" --uri "$uri" "${mtls[@]}" put k1 hello || fail "put over TLS"
[[ "$("$client" --uri "$uri" "${mtls[@]}" get k1)" == hello ]] || fail "get over TLS"
"$rpc" list "$uri" "${mtls[@]}" | grep -q 'rdmarpc.examples.kv' || fail "tools/rpc list over TLS"

# Without a client certificate: refused, and told why.
"$client" --uri "$uri" --tls-ca ca.pem get k1 2>err && fail "no client certificate exited 0"
grep -q 'alert certificate required' err || fail "no client certificate: $(cat err)"
# Plaintext to the TLS port.
plain=${uri/tls:/tcp:}
"$client" --uri "$plain" get k1 2>err && fail "plaintext to TLS exited 0"
grep -q 'speaks TLS' err || fail "plaintext to TLS: $(cat err)"
# A server key others may read is refused, naming the file.
chmod 644 server.key
"$server" --uri tls://127.0.0.1:0 --tls-cert server.pem --tls-key server.key \
  >bad.out 2>bad.err && fail "a server with a world-readable key started"
grep -q "server.key' may be used by others (mode 0644)" bad.err || fail "key mode: $(cat bad.err)"

# etcd over TLS, wanting client certificates and a user: the server
# registers with --etcd-*, the client resolves etcd:// with them.
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
etcd_port=$(free_port) peer_port=$(free_port)
etcd_url=https://127.0.0.1:$etcd_port
/usr/bin/etcd --name t --data-dir etcd-data --log-level warn \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "t=http://127.0.0.1:$peer_port" \
  --cert-file server.pem --key-file server.key \
  --client-cert-auth --trusted-ca-file ca.pem >etcd.log 2>&1 &
pids+=($!)
ctl() { ETCDCTL_API=3 /usr/bin/etcdctl --endpoints="$etcd_url" --cacert ca.pem \
  --cert client.pem --key client.key "$@" >>etcdctl.log 2>&1; }
for _ in $(seq 200); do ctl endpoint health && break; sleep 0.1; done
ctl user add root --new-user-password=root-secret &&
  ctl user grant-role root root && ctl auth enable &&
  ctl --user root:root-secret user add kv --new-user-password=kv-secret &&
  ctl --user root:root-secret role add kv &&
  ctl --user root:root-secret role grant-permission kv --prefix=true readwrite /services/ &&
  ctl --user root:root-secret user grant-role kv kv || fail "etcd users: $(cat etcdctl.log etcd.log)"
printf 'kv-secret\n' >etcd-password
etcd_flags=(--etcd-ca ca.pem --etcd-cert etcd-client.pem --etcd-key etcd-client.key
  --etcd-user kv --etcd-password-file etcd-password)
target=etcd://127.0.0.1:$etcd_port/services/kv
"$server" --uri tcp://127.0.0.1:0 --register-at "$target" "${etcd_flags[@]}" \
  >reg.out 2>reg.err &
pids+=($!)
for _ in $(seq 100); do grep -q 'listening on' reg.out && break; sleep 0.1; done
grep -q 'listening on' reg.out || fail "registered server: $(cat reg.out reg.err)"
ok=
for _ in $(seq 50); do  # The registration lands a moment after listening.
  "$client" --uri "$target" "${etcd_flags[@]}" put k2 v2 2>err && ok=1 && break
  sleep 0.2
done
[[ -n $ok ]] || fail "put through etcd with credentials: $(cat err)"
[[ "$("$client" --uri "$target" "${etcd_flags[@]}" get k2)" == v2 ]] || fail "get through etcd"
# Without the etcd user, or without etcd's CA: no server is found.
timeout 60 "$client" --uri "$target" --etcd-ca ca.pem --etcd-cert etcd-client.pem \
  --etcd-key etcd-client.key get k2 2>err && fail "no etcd user exited 0"
grep -q 'permission denied' err || fail "no etcd user: $(cat err)"
timeout 60 "$client" --uri "$target" get k2 2>err && fail "plaintext etcd exited 0"
grep -q 'does the member want TLS' err || fail "plaintext etcd: $(cat err)"
echo "PASS"
