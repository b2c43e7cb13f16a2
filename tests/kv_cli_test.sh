#!/usr/bin/env bash
# The KV example's command-line contract: byte-exact get, @FILE values,
# statuses on stderr with a non-zero exit.
set -uo pipefail
server=$1
client=$2
work=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*" >&2; exit 1; }

"$server" --uri tcp://127.0.0.1:0 --capacity 50000000 >"$work/server.out" 2>"$work/server.err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q 'listening on' "$work/server.out" && break; sleep 0.1; done
uri=$(sed -n 's/^kv server listening on //p' "$work/server.out")
[[ -n $uri ]] || fail "server did not start: $(cat "$work/server.out")"
kv() { "$client" --uri "$uri" "$@"; }

kv put k1 hello || fail "put"
[[ "$(kv get k1)" == hello ]] || fail "get k1"

# Binary value with NULs and no trailing newline, through @FILE.
printf 'a\0b\nc\0' >"$work/bin"
head -c 3000000 /dev/urandom >>"$work/bin"
kv put bin "@$work/bin" || fail "put @FILE"
kv get bin >"$work/bin.out" || fail "get bin"
cmp -s "$work/bin" "$work/bin.out" || fail "get is not byte-exact"

kv get missing >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -ne 0 ]] || fail "missing key exited 0"
grep -q '^NOT_FOUND' "$work/err" || fail "missing key: stderr was '$(cat "$work/err")'"
[[ ! -s "$work/out" ]] || fail "missing key wrote to stdout"

kv put "" x 2>"$work/err" && fail "empty key exited 0"
grep -q '^INVALID_ARGUMENT' "$work/err" || fail "empty key: '$(cat "$work/err")'"

head -c 30000000 /dev/zero >"$work/big"
kv put big1 "@$work/big" || fail "put big1"
kv put big2 "@$work/big" 2>"$work/err" && fail "over capacity exited 0"
grep -q '^RESOURCE_EXHAUSTED' "$work/err" || fail "capacity: '$(cat "$work/err")'"

[[ "$(kv scan k)" == "$(printf 'k1\t5')" ]] || fail "scan: '$(kv scan k)'"
kv del k1 || fail "del"
kv del k1 2>/dev/null && fail "second del exited 0"
kv load --count 300 --size 64 | grep -q 'all verified' || fail "load"
# The streaming methods: a client-streaming PutStream, a server-streaming
# ScanStream; an empty key ends the PutStream with its error, the puts
# before it kept.
[[ "$(kv put-stream s1 a s2 bb s3 ccc)" == "stored 3 keys, 6 value bytes" ]] ||
  fail "put-stream: '$(kv put-stream s1 a s2 bb s3 ccc)'"
[[ "$(kv scan-stream s)" == "$(printf 's1\t1\ns2\t2\ns3\t3')" ]] ||
  fail "scan-stream: '$(kv scan-stream s)'"
[[ "$(kv scan-stream s --limit 2 | wc -l)" == 2 ]] || fail "scan-stream --limit"
kv put-stream s4 d "" e 2>"$work/err" && fail "put-stream with an empty key exited 0"
grep -q "INVALID_ARGUMENT" "$work/err" || fail "put-stream error: $(cat "$work/err")"
[[ "$(kv get s4)" == d ]] || fail "the put before the failed one"
kv frobnicate 2>/dev/null
[[ $? -eq 2 ]] || fail "bad usage should exit 2"

# A server that wants a token (interceptors): refused without it, served
# with it, each call logged.
echo s3cret >"$work/token"
"$server" --uri tcp://127.0.0.1:0 --token-file "$work/token" --log-calls 1 \
  >"$work/guarded.out" 2>"$work/guarded.err" &
guarded=$!
trap 'kill $pid $guarded 2>/dev/null; wait $pid $guarded 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q 'listening on' "$work/guarded.out" && break; sleep 0.1; done
guarded_uri=$(sed -n 's/^kv server listening on //p' "$work/guarded.out")
[[ -n $guarded_uri ]] || fail "guarded server did not start"
"$client" --uri "$guarded_uri" put t1 v 2>"$work/err" && fail "no token exited 0"
grep -q UNAUTHENTICATED "$work/err" || fail "no token: $(cat "$work/err")"
KV_TOKEN=wrong "$client" --uri "$guarded_uri" put t1 v 2>/dev/null && fail "wrong token exited 0"
KV_TOKEN=s3cret "$client" --uri "$guarded_uri" put t1 v || fail "put with the token"
[[ "$("$client" --uri "$guarded_uri" --token-file "$work/token" get t1)" == v ]] || fail "get with the token"
# A token on the command line is refused, with the way to give it.
"$client" --uri "$guarded_uri" --token s3cret get t1 2>"$work/err" && fail "--token exited 0"
grep -q "token-file" "$work/err" || fail "--token: $(cat "$work/err")"
grep -q 'KeyValue/Put unary -> OK' "$work/guarded.out" "$work/guarded.err" ||
  fail "the server logged no call: $(cat "$work/guarded.err")"
echo "kv cli: all checks passed"
