#!/usr/bin/env bash
# The web surface over real HTTP(S) with curl and certificates made here with
# openssl: TLS (plain HTTP refused, min_version, client certificates), basic
# auth on every endpoint but the probes, configured headers, SIGHUP reload,
# --config.file with flags overriding it, bad config files (exit 2 each), and
# requests that must not hurt the server.
source "$(dirname "$0")/lib.sh" "$1"
PASSWD=$BUILD/tools/xpu-passwd/xpu-passwd
cd "$TMP"
# ---- certificates: a CA, a server cert for 127.0.0.1, a client cert ----
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=xpu-test-ca" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj "/CN=127.0.0.1" 2>/dev/null
printf "subjectAltName=IP:127.0.0.1,IP:::1\n" >srv.ext
openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 -extfile srv.ext 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout cli.key -out cli.csr -subj "/CN=prometheus" 2>/dev/null
openssl x509 -req -in cli.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out cli.crt -days 2 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue.key -out rogue.crt -days 2 -subj "/CN=rogue" 2>/dev/null
HASH=$(echo 'open sesame' | "$PASSWD" --cost 6)

code() { curl -s -o /dev/null -w '%{http_code}' "$@" || true; }
expect() {  # expect WANT DESCRIPTION CURL-ARGS...
  local want=$1 what=$2; shift 2
  local got; got=$(code "$@")
  [ "$got" = "$want" ] || fail "$what: got HTTP $got, want $want"
}

start_sim sim --interval 200ms

# ---- TLS 1.2+, basic auth, headers ----
cat >web.yml <<YML
tls_server_config:
  cert_file: $TMP/srv.crt
  key_file: $TMP/srv.key
  min_version: TLS12
http_server_config:
  headers:
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
basic_auth_users:
  prometheus: '$HASH'
YML
start_exporter sim --web.config.file web.yml --collector.interval 200ms \
  --web.probe-listen-address 127.0.0.1:0
U=${URL/http:/https:}
# The probes' own listener: plain HTTP, no auth, only the two probes.
wait_for 10 grep -q "probes (/-/healthy, /-/ready) answered on their own port" "$TMP/exporter.log" ||
  fail "no probe listener: $(cat "$TMP/exporter.log")"
P="http://127.0.0.1:$(grep -o 'on their own port(s) [0-9]*' "$TMP/exporter.log" | awk '{print $5}')"
expect 200 "/-/healthy on the probe listener" "$P/-/healthy"
wait_for 10 bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' $P/-/ready) = 200 ]" ||
  fail "/-/ready not 200 on the probe listener"
expect 404 "/metrics is not on the probe listener" "$P/metrics"
page=$(curl -s --cacert ca.crt -u 'prometheus:open sesame' "$U/metrics")
grep -q '^xpu_exporter_http_probe_connections_closed_total{reason="answered"} [1-9]' <<<"$page" ||
  fail "probe listener's answers not counted"
grep -q '^xpu_exporter_tls_certificate_reloads_total{result="success"} 0' <<<"$page" ||
  fail "certificate reloads not shown"
expect 000 "plain HTTP to the TLS port" "$URL/-/healthy"
for path in /metrics /status /config / /nope; do
  expect 401 "$path without credentials" --cacert ca.crt "$U$path"
  expect 401 "$path with a wrong password" --cacert ca.crt -u prometheus:wrong "$U$path"
  expect 401 "$path with an unknown user" --cacert ca.crt -u mallory:'open sesame' "$U$path"
done
for path in /metrics /status /config /; do
  expect 200 "$path with the right password" --cacert ca.crt -u 'prometheus:open sesame' "$U$path"
done
expect 404 "unknown path, authenticated" --cacert ca.crt -u 'prometheus:open sesame' "$U/nope"
expect 200 "/-/healthy stays open" --cacert ca.crt "$U/-/healthy"
wait_for 10 bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' --cacert ca.crt $U/-/ready) = 200 ]" || fail "/-/ready not open"
hdrs=$(curl -s -D - -o /dev/null --cacert ca.crt -u 'prometheus:open sesame' "$U/metrics")
grep -qi '^X-Frame-Options: deny' <<<"$hdrs" || fail "configured header missing"
grep -qi '^X-Content-Type-Options: nosniff' <<<"$hdrs" || fail "configured header missing"
cfg=$(curl -s --cacert ca.crt -u 'prometheus:open sesame' "$U/config")
grep -q '"prometheus": "<secret>"' <<<"$cfg" || fail "/config does not redact the user's hash"
grep -q '\$2y\$' <<<"$cfg" && fail "/config leaks a bcrypt hash"
grep -q '"web.config.file"' <<<"$cfg" || fail "/config lacks the flags"

# ---- SIGHUP: a bad file is logged and the old one kept; a good one applies ----
echo "basic_auth_users: {prometheus: not-a-hash}" >web.yml.bad
cp web.yml web.yml.good
cp web.yml.bad web.yml
kill -HUP "$EXP_PID"
wait_for 10 grep -q "kept the configuration in force" "$TMP/exporter.log" || fail "bad reload not reported"
expect 200 "old config kept after a bad reload" --cacert ca.crt -u 'prometheus:open sesame' "$U/metrics"
HASH2=$(echo 'new secret' | "$PASSWD" --cost 6)
sed "s|'$HASH'|'$HASH2'|" web.yml.good >web.yml
kill -HUP "$EXP_PID"
wait_for 10 grep -q "configuration reloaded" "$TMP/exporter.log" || fail "good reload not reported"
wait_for 10 bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' --cacert ca.crt -u 'prometheus:new secret' $U/metrics) = 200 ]" ||
  fail "new password not in force after SIGHUP"
expect 401 "old password refused after SIGHUP" --cacert ca.crt -u 'prometheus:open sesame' "$U/metrics"

# ---- SIGHUP: a certificate rotated under the same path is served ----
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca2.key -out ca2.crt -days 2 -subj "/CN=xpu-test-ca2" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout srv2.key -out srv2.csr -subj "/CN=127.0.0.1" 2>/dev/null
openssl x509 -req -in srv2.csr -CA ca2.crt -CAkey ca2.key -CAcreateserial -out srv2.crt -days 2 -extfile srv.ext 2>/dev/null
expect 000 "the rotated CA is not trusted yet" --cacert ca2.crt "$U/-/healthy"
cp srv.crt srv1.crt; cp srv.key srv1.key
cp srv2.crt srv.crt; cp srv2.key srv.key
kill -HUP "$EXP_PID"
wait_for 10 bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' --cacert ca2.crt $U/-/healthy) = 200 ]" ||
  fail "rotated certificate not served after SIGHUP"
cp srv1.crt srv.crt; cp srv1.key srv.key
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true

# ---- IPv6: [::1] over HTTP and HTTPS; ":0" listens on IPv6 and IPv4 ----
# (civetweb built from Debian's source with IPv6, docs/http-api.md)
start_v6() {  # start_v6 LOG FLAGS...: sets V6_PID and V6_PORT
  local log=$1; shift
  "$EXPORTER" --xdm.endpoint "unix://$TMP/sim.sock" --controller.endpoint "unix://$TMP/sim-ctl.sock" \
    --hal none --kubelet.pod-resources-socket "" "$@" 2>"$log" &
  V6_PID=$!
  PIDS+=("$V6_PID")
  wait_for 10 grep -q "listening on port" "$log" || fail "exporter did not start with $*: $(cat "$log")"
  V6_PORT=$(grep -o 'listening on port(s) [0-9]*' "$log" | awk '{print $4}')
}
if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
  start_v6 v6.log --web.listen-address "[::1]:0"
  expect 200 "HTTP over [::1]" -g "http://[::1]:$V6_PORT/-/healthy"
  kill "$V6_PID"
  cat >web6.yml <<YML
tls_server_config: {cert_file: $TMP/srv.crt, key_file: $TMP/srv.key}
YML
  start_v6 v6s.log --web.listen-address "[::1]:0" --web.config.file web6.yml
  expect 200 "HTTPS over [::1]" -g --cacert ca.crt "https://[::1]:$V6_PORT/-/healthy"
  expect 000 "plain HTTP to the TLS port over [::1]" -g "http://[::1]:$V6_PORT/-/healthy"
  kill "$V6_PID"
  start_v6 dual.log --web.listen-address ":0"
  expect 200 "':0' over IPv6" -g "http://[::1]:$V6_PORT/-/healthy"
  expect 200 "':0' over IPv4" "http://127.0.0.1:$V6_PORT/-/healthy"
  kill "$V6_PID"
else
  echo "SKIP: no IPv6 on this machine"
fi

# ---- min_version TLS13 refuses a TLS 1.2 client ----
cat >web13.yml <<YML
tls_server_config: {cert_file: $TMP/srv.crt, key_file: $TMP/srv.key, min_version: TLS13}
YML
start_exporter sim --web.config.file web13.yml
U=${URL/http:/https:}
expect 200 "TLS 1.3 client" --cacert ca.crt --tlsv1.3 "$U/-/healthy"
expect 000 "TLS 1.2 client under min_version TLS13" --cacert ca.crt --tls-max 1.2 "$U/-/healthy"
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true

# ---- RequireAndVerifyClientCert ----
cat >mtls.yml <<YML
tls_server_config:
  cert_file: $TMP/srv.crt
  key_file: $TMP/srv.key
  client_ca_file: $TMP/ca.crt
  client_auth_type: RequireAndVerifyClientCert
YML
start_exporter sim --web.config.file mtls.yml
U=${URL/http:/https:}
expect 000 "no client certificate" --cacert ca.crt "$U/metrics"
expect 000 "a certificate from another CA" --cacert ca.crt --cert rogue.crt --key rogue.key "$U/metrics"
expect 200 "a CA-signed client certificate" --cacert ca.crt --cert cli.crt --key cli.key "$U/metrics"
# TLS 1.2 session resumption under client-certificate verification needs a
# session id context; without one OpenSSL aborts the resumed handshake.
A=${U#https://}; A=${A%%/*}
openssl s_client -connect "$A" -tls1_2 -CAfile ca.crt -cert cli.crt -key cli.key -sess_out sess.pem </dev/null >/dev/null 2>&1 ||
  fail "TLS 1.2 handshake with a client certificate"
resumed=$(openssl s_client -connect "$A" -tls1_2 -CAfile ca.crt -cert cli.crt -key cli.key -sess_in sess.pem </dev/null 2>&1 || true)
grep -q "^Reused, TLSv1.2" <<<"$resumed" || fail "TLS 1.2 session not resumed with a client certificate: $(grep -m1 -iE 'error|New,' <<<"$resumed")"
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true

# ---- probes protected on request ----
printf "basic_auth_users:\n  prometheus: '%s'\n" "$HASH" >auth.yml
start_exporter sim --web.config.file auth.yml --web.probes-require-auth
expect 401 "/-/healthy protected by flag" "$URL/-/healthy"
expect 200 "/-/healthy with credentials" -u 'prometheus:open sesame' "$URL/-/healthy"
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true

# ---- --config.file: values apply, flags override, sources reported ----
cat >exporter.yml <<YML
collector:
  interval: 200ms
  max-series: 12345
log.level: warn
web.telemetry-path: /custom
YML
start_exporter sim --config.file exporter.yml --log.level info
expect 200 "telemetry path from the file" "${URL%/metrics}/custom"
expect 404 "default path no longer served" "${URL%/metrics}/metrics"
cfg=$(curl -s "${URL%/metrics}/config")
python3 - "$cfg" <<'PY' || fail "/config sources wrong"
import json, sys
s = json.loads(sys.argv[1])["settings"]
assert s["collector.max-series"] == {"value": "12345", "source": "file", "reload": "restart", "appliedBy": "restart"}, s["collector.max-series"]
assert s["log.level"] == {"value": "info", "source": "flag", "reload": "live", "appliedBy": "log"}, s["log.level"]
assert s["hal.interval"]["source"] == "default", s["hal.interval"]
PY
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true

# ---- bad files and flags: one clear line, exit 2 ----
bad() {  # bad DESCRIPTION EXPECTED-TEXT ARGS...
  local what=$1 text=$2; shift 2
  local out rc=0
  out=$("$EXPORTER" --web.listen-address 127.0.0.1:0 --hal none "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 2 ] || fail "$what: exit $rc, want 2 ($out)"
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "$what: more than one line: $out"
  grep -qF -- "$text" <<<"$out" || fail "$what: message lacks '$text': $out"
}
printf "collector:\n  interval: 1s\n  colour: red\n" >unknown.yml
bad "unknown config key" "unknown.yml:3: unknown key 'collector.colour'" --config.file unknown.yml
printf "collector.interval: [1s\n" >broken.yml
bad "malformed YAML" "broken.yml" --config.file broken.yml
printf "collector.interval: soon\n" >badval.yml
bad "bad value in the config file" "soon" --config.file badval.yml
bad "missing config file" "cannot read" --config.file /nonexistent.yml
printf "tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: %s/srv.key\n" "$TMP" >w1.yml
bad "web config: missing certificate" "cannot read /nonexistent.crt" --web.config.file w1.yml
printf "tls_server_config:\n  cert_file: %s/srv.crt\n  key_file: %s/srv.key\n  min_version: TLS99\n" "$TMP" "$TMP" >w2.yml
bad "web config: bad TLS version" "TLS99" --web.config.file w2.yml
printf "tls_server_config:\n  cert_file: %s/srv.crt\n  key_file: %s/srv.key\n  client_ca_file: %s/ca.crt\n" "$TMP" "$TMP" "$TMP" >w3.yml
bad "web config: client CA without client auth" "client CA is set but client_auth_type is NoClientCert" --web.config.file w3.yml
printf "basic_auth_users:\n  alice: plaintext\n" >w4.yml
bad "web config: plaintext password" "not a bcrypt hash" --web.config.file w4.yml
printf "http_server_config:\n  headers:\n    Set-Cookie: x\n" >w5.yml
bad "web config: forbidden header" "may not be set" --web.config.file w5.yml
printf "tls_server_config:\n  cert_file: %s/srv.crt\n  key_file: %s/srv.key\n  ciphers: all\n" "$TMP" "$TMP" >w6.yml
bad "web config: unknown key" "unknown key 'tls_server_config.ciphers'" --web.config.file w6.yml
printf "tls_server_config:\n  cert_file: %s/srv.crt\n  key_file: %s/srv.key\n  max_version: TLS11\n" "$TMP" "$TMP" >w8.yml
bad "web config: TLS 1.1 cannot be served" "max_version TLS11 leaves no version to serve" --web.config.file w8.yml
printf "tls_server_config:\n  cert_file: %s/srv.crt\n  key_file: %s/srv.key\n  min_version: TLS13\n  max_version: TLS12\n" "$TMP" "$TMP" >w9.yml
bad "web config: min above max" "min_version above max_version" --web.config.file w9.yml
bad "absurd duration" "longer than" --collector.interval 100y
bad "telemetry path shadowing a probe" "would shadow" --web.telemetry-path /-/healthy
bad "telemetry path shadowing the landing page" "would shadow" --web.telemetry-path /
printf "tls_server_config:\n  cert_file: %s/srv.crt\n  key_file: %s/cli.key\n" "$TMP" "$TMP" >w7.yml
bad "web config: key does not match certificate" "key values mismatch" --web.config.file w7.yml

# ---- hostile requests: no crash, no file reads ----
start_exporter sim
A=${URL#http://}
# No route reads files, so a traversal must end in our router: the normalised
# path of /x/../metrics is served, and no spelling reaches /etc/passwd.
expect 200 "dot segments resolved before routing" --path-as-is "${URL%/metrics}/x/../metrics"
for p in /../../../../etc/passwd /%2e%2e/%2e%2e/etc/passwd /metrics/..%2f..%2f..%2fetc%2fpasswd; do
  body=$(curl -s --path-as-is "${URL%/metrics}$p" || true)
  grep -q "root:" <<<"$body" && fail "path traversal $p served a file"
  [ "$(code --path-as-is "${URL%/metrics}$p")" = 404 ] || fail "path traversal $p not 404"
done
expect 405 "wrong method" -X DELETE "$URL"
resp=$(printf 'GARBAGE\r\n\r\n' | timeout 5 bash -c "exec 3<>/dev/tcp/${A%:*}/${A#*:}; cat >&3; cat <&3" || true)
grep -qE '^HTTP/1.[01] 4' <<<"$resp" || fail "malformed request not answered 4xx: $resp"
long=$(head -c 20000 /dev/zero | tr '\0' 'a')
code "$URL?$long" >/dev/null
kill -0 "$EXP_PID" || fail "exporter died on hostile requests"
expect 200 "still serving" "$URL"
echo "web surface verified"
