#!/usr/bin/env bash
# tools/rpc's contract against the KV example server (introspection on):
# list, describe, call through reflection with text-format requests and
# responses, streaming calls in JSON lines, exit codes from the status, the
# stats table, and headers (-H) for a server that checks a token.
set -uo pipefail
server=$1
rpc=$2
work=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*" >&2; exit 1; }

"$server" --uri tcp://127.0.0.1:0 >"$work/server.out" 2>"$work/server.err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q 'listening on' "$work/server.out" && break; sleep 0.1; done
uri=$(sed -n 's/^kv server listening on //p' "$work/server.out")
[[ -n $uri ]] || fail "server did not start: $(cat "$work/server.out")"
kv=rdmarpc.examples.kv.KeyValue

"$rpc" list "$uri" >"$work/list" || fail "list exited $?"
grep -qx "$kv" "$work/list" || fail "list lacks $kv: $(cat "$work/list")"
grep -qx "  Put" "$work/list" || fail "list lacks Put"
grep -qx "rdmarpc.Introspection" "$work/list" || fail "list lacks Introspection"

"$rpc" describe "$uri" "$kv" >"$work/describe" || fail "describe exited $?"
grep -q '^service KeyValue {' "$work/describe" || fail "describe: $(cat "$work/describe")"
grep -q 'rpc Get(.rdmarpc.examples.kv.GetRequest) returns (.rdmarpc.examples.kv.GetReply)' \
  "$work/describe" || fail "describe lacks Get"
# With its options: a client may send a Get again (kv.proto).
grep -q 'option idempotency_level = NO_SIDE_EFFECTS;' "$work/describe" ||
  fail "describe lacks Get's idempotency_level"
grep -q '^message GetReply {' "$work/describe" || fail "describe lacks GetReply"

"$rpc" call "$uri" "$kv/Put" 'key: "k" value: "a\000b"' || fail "put exited $?"
out=$("$rpc" call "$uri" "$kv/Get" 'key: "k"') || fail "get exited $?"
[[ $out == 'value: "a\000b"' ]] || fail "get printed '$out'"

"$rpc" call "$uri" "$kv/Get" 'key: "missing"' >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 5 ]] || fail "missing key exited $rc, not 5 (NOT_FOUND)"
grep -q "NOT_FOUND: key 'missing' not found" "$work/err" || fail "stderr: $(cat "$work/err")"
[[ ! -s $work/out ]] || fail "an error wrote to stdout"

"$rpc" call "$uri" "$kv/Get" 'nope: 1' 2>"$work/err"
rc=$?
[[ $rc -eq 3 ]] || fail "bad text exited $rc, not 3 (INVALID_ARGUMENT)"
grep -q 'has no field named "nope"' "$work/err" || fail "stderr: $(cat "$work/err")"

"$rpc" call "$uri" "$kv/Nope" '' 2>/dev/null
rc=$?
[[ $rc -eq 12 ]] || fail "unknown method exited $rc, not 12 (UNIMPLEMENTED)"
"$rpc" describe "$uri" no.Such 2>/dev/null
rc=$?
[[ $rc -eq 5 ]] || fail "unknown service exited $rc, not 5"
"$rpc" list tcp://127.0.0.1:1 2>/dev/null
rc=$?
[[ $rc -eq 14 ]] || fail "no server exited $rc, not 14 (UNAVAILABLE)"
"$rpc" frobnicate "$uri" 2>/dev/null
rc=$?
[[ $rc -eq 64 ]] || fail "bad usage exited $rc, not 64"

# Streaming methods: JSON lines in, JSON lines out.
printf '{"key":"s1","value":"YQ=="}\n\n{"key":"s2","value":"YmI="}\n' |
  "$rpc" call "$uri" "$kv/PutStream" >"$work/put-stream" || fail "PutStream exited $?"
[[ "$(cat "$work/put-stream")" == '{"keys":"2","value_bytes":"3"}' ]] ||
  fail "PutStream printed '$(cat "$work/put-stream")'"
"$rpc" call "$uri" "$kv/ScanStream" 'prefix: "s"' >"$work/scan-stream" ||
  fail "ScanStream exited $?"
[[ "$(cat "$work/scan-stream")" == "$(printf '%s\n%s' '{"key":"s1","value":"YQ=="}' '{"key":"s2","value":"YmI="}')" ]] ||
  fail "ScanStream printed '$(cat "$work/scan-stream")'"
echo '{"prefix":"s2"}' | "$rpc" call "$uri" "$kv/ScanStream" >"$work/scan-one" ||
  fail "ScanStream from stdin exited $?"
[[ "$(cat "$work/scan-one")" == '{"key":"s2","value":"YmI="}' ]] ||
  fail "ScanStream from stdin printed '$(cat "$work/scan-one")'"
echo '{"key":' | "$rpc" call "$uri" "$kv/PutStream" 2>"$work/err"
rc=$?
[[ $rc -eq 3 ]] || fail "a bad JSON line exited $rc, not 3 (INVALID_ARGUMENT)"
grep -q "stdin line 1 is not a JSON rdmarpc.examples.kv.PutRequest" "$work/err" ||
  fail "bad JSON line: $(cat "$work/err")"

"$rpc" stats "$uri" >"$work/stats" || fail "stats exited $?"
# Get: 2 calls, 1 OK, 1 error (NOT_FOUND).
grep -Eq "^$kv/Get +2 +1 +1 .*NOT_FOUND=1" "$work/stats" || fail "stats: $(cat "$work/stats")"
grep -Eq "^$kv/Put +1 +1 +0 " "$work/stats" || fail "stats Put: $(cat "$work/stats")"
grep -Eq '^tcp://127\.0\.0\.1:[0-9]+ ' "$work/stats" || fail "stats lacks the connection"
# The streams: PutStream read 2 messages; ScanStream sent 3 over two calls.
grep -Eq "^$kv/PutStream +0 +2 +0$" "$work/stats" || fail "stats PutStream: $(cat "$work/stats")"
grep -Eq "^$kv/ScanStream +0 +0 +3$" "$work/stats" || fail "stats ScanStream: $(cat "$work/stats")"

# Headers (-H): a server that checks a token refuses calls without it, and
# takes them with it, streaming ones too.
KV_TOKEN=s3cret "$server" --uri tcp://127.0.0.1:0 >"$work/token.out" 2>"$work/token.err" &
token_pid=$!
trap 'kill $pid $token_pid 2>/dev/null; wait $pid $token_pid 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q 'listening on' "$work/token.out" && break; sleep 0.1; done
token_uri=$(sed -n 's/^kv server listening on //p' "$work/token.out")
[[ -n $token_uri ]] || fail "token server did not start: $(cat "$work/token.err")"
"$rpc" call "$token_uri" "$kv/Put" 'key: "t" value: "v"' 2>"$work/err"
rc=$?
[[ $rc -eq 16 ]] || fail "a call without the token exited $rc, not 16 (UNAUTHENTICATED)"
"$rpc" -H 'authorization: Bearer s3cret' call "$token_uri" "$kv/Put" 'key: "t" value: "v"' ||
  fail "a call with -H exited $?"
out=$("$rpc" call "$token_uri" "$kv/Get" 'key: "t"' --header 'Authorization:Bearer s3cret') ||
  fail "a call with --header exited $?"
[[ $out == 'value: "v"' ]] || fail "get with a header printed '$out'"
"$rpc" -H 'authorization: Bearer wrong' call "$token_uri" "$kv/Get" 'key: "t"' 2>/dev/null
rc=$?
[[ $rc -eq 16 ]] || fail "a wrong token exited $rc, not 16"
echo '{"prefix":"t"}' | "$rpc" -H 'authorization: Bearer s3cret' call "$token_uri" \
  "$kv/ScanStream" >"$work/scan-token" || fail "ScanStream with -H exited $?"
[[ "$(cat "$work/scan-token")" == '{"key":"t","value":"dg=="}' ]] ||
  fail "ScanStream with -H printed '$(cat "$work/scan-token")'"
"$rpc" -H 'no-colon' list "$token_uri" 2>/dev/null
rc=$?
[[ $rc -eq 64 ]] || fail "a header without a colon exited $rc, not 64"
echo PASS
