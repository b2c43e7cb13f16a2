#!/usr/bin/env bash
# TLS from the command line: certificates made with the openssl CLI, the KV
# example's server and client and tools/rpc over tls:// with client
# certificates (--tls-cert, --tls-key, --tls-ca), and the refusals a user
# meets: no client certificate, plaintext against TLS, a key others can read.
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
issue() {  # NAME SAN
  openssl req "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" \
    2>/dev/null || fail "request for $1"
  printf 'subjectAltName=%s\n' "$2" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out "$1.pem" -days 1 -extfile "$1.ext" 2>/dev/null || fail "sign $1"
}
issue server "IP:127.0.0.1,DNS:localhost"
issue client "URI:spiffe://test/kv-client"

"$server" --uri tls://127.0.0.1:0 --tls-cert server.pem --tls-key server.key \
  --tls-ca ca.pem >server.out 2>server.err &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
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
echo "PASS"
