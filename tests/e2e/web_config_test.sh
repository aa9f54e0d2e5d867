#!/usr/bin/env bash
# exporter-toolkit's web configuration with real clients (issue 36): inline
# PEM served like files, relative file names from the config's folder,
# cipher suites and curves (openssl s_client offered one outside the list is
# refused, one inside served), client_allowed_sans for DNS, IP and URI SANs
# (curl), all of it changed by SIGHUP and served to the next handshake,
# VerifyClientCertIfGiven with the system's trust store, http2 (HTTP/1.1
# served, said once), rate_limit (429 with Retry-After, counted; the probes
# never limited), and the values the format calls invalid (one line, exit 2).
source "$(dirname "$0")/lib.sh" "$1"
PASSWD=$BUILD/tools/xpu-passwd/xpu-passwd
cd "$TMP"
# ---- certificates: an EC CA, an RSA server cert, client certs with SANs ----
ec() { echo "-newkey ec -pkeyopt ec_paramgen_curve:P-256"; }
# shellcheck disable=SC2046
openssl req -x509 $(ec) -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=xpu-test-ca" 2>/dev/null
sign() {  # sign NAME SUBJECT EXT [KEYARGS...]
  local name=$1 subj=$2 ext=$3; shift 3
  openssl req "$@" -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" 2>/dev/null
  printf "%s\n" "$ext" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$name.crt" \
    -days 2 -extfile "$name.ext" 2>/dev/null || fail "cannot sign $name"
}
sign srv /CN=127.0.0.1 "subjectAltName=IP:127.0.0.1" -newkey rsa:2048
# shellcheck disable=SC2046
sign dns /CN=c "subjectAltName=DNS:scraper.example" $(ec)
# shellcheck disable=SC2046
sign ip /CN=c "subjectAltName=IP:10.1.2.3" $(ec)
# shellcheck disable=SC2046
sign uri /CN=c "subjectAltName=URI:spiffe://cluster/sa/prometheus" $(ec)
# shellcheck disable=SC2046
sign other /CN=c "subjectAltName=DNS:other.example" $(ec)
# shellcheck disable=SC2046
openssl req -x509 $(ec) -nodes -keyout rogue.key -out rogue.crt -days 2 -subj /CN=rogue 2>/dev/null

code() { curl -s -o /dev/null -w '%{http_code}' "$@" || true; }
expect() {  # expect WANT DESCRIPTION CURL-ARGS...
  local want=$1 what=$2; shift 2
  local got; got=$(code "$@")
  [ "$got" = "$want" ] || fail "$what: got HTTP $got, want $want"
}
indent() { sed 's/^/    /' "$1"; }
# handshake ARGS...: what openssl s_client negotiated with the server at $A
# ("Cipher is X", or "Cipher is (NONE)"), presenting the dns client cert.
handshake() {
  openssl s_client -connect "$A" -CAfile ca.crt -cert dns.crt -key dns.key "$@" </dev/null 2>&1 |
    grep -o 'Cipher is [^ ]*' | head -1 || true
}

start_sim sim --interval 200ms

# ---- inline PEM, relative CA file, ciphers, curves, SANs, http2 ----
mkdir -p conf
cp ca.crt conf/clients-ca.crt
write_config() {  # write_config CIPHER... -- CURVE... -- SAN...
  local ciphers=() curves=() sans=() part=0 x
  for x in "$@"; do
    if [ "$x" = -- ]; then part=$((part + 1)); continue; fi
    case $part in 0) ciphers+=("$x") ;; 1) curves+=("$x") ;; *) sans+=("$x") ;; esac
  done
  {
    echo "tls_server_config:"
    echo "  cert: |"; indent srv.crt
    echo "  key: |"; indent srv.key
    echo "  client_ca_file: clients-ca.crt"
    echo "  client_auth_type: RequireAndVerifyClientCert"
    echo "  cipher_suites:"; printf '    - %s\n' "${ciphers[@]}"
    echo "  curve_preferences:"; printf '    - %s\n' "${curves[@]}"
    echo "  client_allowed_sans:"; printf '    - %s\n' "${sans[@]}"
    echo "http_server_config:"
    echo "  http2: true"
  } >conf/web.yml.new
  mv conf/web.yml.new conf/web.yml
}
write_config TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 -- \
  CurveP384 -- scraper.example 10.1.2.3 spiffe://cluster/sa/prometheus
start_exporter sim --web.config.file conf/web.yml
U=${URL/http:/https:}
A=${U#https://}; A=${A%%/*}
grep -q "HTTP/2 is not offered" "$TMP/exporter.log" || fail "no log line about HTTP/2"
for c in dns ip uri; do
  expect 200 "client certificate with an allowed SAN ($c)" --cacert ca.crt --cert $c.crt --key $c.key "$U/metrics"
done
expect 000 "client certificate without an allowed SAN" --cacert ca.crt --cert other.crt --key other.key "$U/metrics"
expect 000 "no client certificate" --cacert ca.crt "$U/metrics"
expect 000 "a certificate from no CA, its SAN allowed or not" --cacert ca.crt --cert rogue.crt --key rogue.key "$U/metrics"
[ "$(curl -s -o /dev/null -w '%{http_version}' --http2 --cacert ca.crt --cert dns.crt --key dns.key "$U/metrics")" = 1.1 ] ||
  fail "HTTP/2 asked for: not answered over HTTP/1.1"
got=$(handshake -tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256)
[ "$got" = "Cipher is ECDHE-RSA-AES128-GCM-SHA256" ] || fail "a listed suite not served: $got"
got=$(handshake -tls1_2 -cipher ECDHE-RSA-CHACHA20-POLY1305)
[ "$got" = "Cipher is (NONE)" ] || fail "a suite outside cipher_suites served: $got"
got=$(handshake -tls1_2 -cipher 'ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256')
[ "$got" = "Cipher is ECDHE-RSA-AES128-GCM-SHA256" ] || fail "the server's order not preferred over the client's: $got"
got=$(handshake -tls1_3 -groups P-384)
[[ $got == "Cipher is TLS_"* ]] || fail "a listed curve not served: $got"
for v in -tls1_2 -tls1_3; do
  got=$(handshake $v -groups P-256:X25519)
  [ "$got" = "Cipher is (NONE)" ] || fail "curves outside curve_preferences served ($v): $got"
done

# ---- SIGHUP: the next handshake takes the new suites, curves and SANs ----
# (CurveP256 stays for TLS 1.2: OpenSSL there refuses an EC client
# certificate whose curve is not in the list; docs/http-api.md.)
write_config TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 -- X25519 CurveP256 -- other.example
kill -HUP "$EXP_PID"
wait_for 10 grep -q "configuration reloaded" "$TMP/exporter.log" || fail "reload not reported: $(cat "$TMP/exporter.log")"
# The SAN check judges the client's certificate: the dns one is now refused
# (-cert dns.crt in handshake() still negotiates; curl sees the refusal).
got=$(handshake -tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256)
[ "$got" = "Cipher is (NONE)" ] || fail "a suite taken out by the reload still served: $got"
got=$(handshake -tls1_2 -cipher ECDHE-RSA-CHACHA20-POLY1305)
[ "$got" = "Cipher is ECDHE-RSA-CHACHA20-POLY1305" ] || fail "a suite added by the reload not served: $got"
got=$(handshake -tls1_3 -groups P-384)
[ "$got" = "Cipher is (NONE)" ] || fail "a curve taken out by the reload still served: $got"
got=$(handshake -tls1_3 -groups X25519)
[[ $got == "Cipher is TLS_"* ]] || fail "a curve added by the reload not served: $got"
got=$(handshake -tls1_3 -groups P-521)
[ "$got" = "Cipher is (NONE)" ] || fail "a curve never listed served after the reload: $got"
expect 000 "a SAN taken out by the reload" --cacert ca.crt --cert dns.crt --key dns.key "$U/metrics"
expect 200 "a SAN added by the reload" --cacert ca.crt --cert other.crt --key other.key "$U/metrics"
# A session made under one config is not resumed under the next: its client
# never passed the new client-auth rules (here only the SAN list changes).
s_other() { openssl s_client -connect "$A" -tls1_2 -CAfile ca.crt -cert other.crt -key other.key "$@" </dev/null 2>&1 || true; }
out=$(s_other -sess_out sess.pem); [ -s sess.pem ] || fail "no TLS 1.2 session: $(grep -E "^New|error|Verify" <<<"$out")"
out=$(s_other -sess_in sess.pem); grep -q "^Reused, TLSv1.2" <<<"$out" || fail "a TLS 1.2 session not resumed under the same config: $(grep -E "^New|^Reused|error|Verify" <<<"$out")"
n=$(grep -c "configuration reloaded" "$TMP/exporter.log")
write_config TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 -- X25519 CurveP256 -- scraper.example
kill -HUP "$EXP_PID"
wait_for 10 bash -c "[ \$(grep -c 'configuration reloaded' '$TMP/exporter.log') -gt $n ]" || fail "second reload not reported"
grep -q "^Reused" <<<"$(s_other -sess_in sess.pem)" && fail "a session made before the reload resumed under its new client_allowed_sans"
expect 000 "the SAN taken out by the second reload" --cacert ca.crt --cert other.crt --key other.key "$U/metrics"
expect 200 "the SAN put back by the second reload" --cacert ca.crt --cert dns.crt --key dns.key "$U/metrics"
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true

# ---- VerifyClientCertIfGiven without a CA: the system's trust store ----
printf "tls_server_config:\n  cert_file: srv.crt\n  key_file: srv.key\n  client_auth_type: VerifyClientCertIfGiven\n" >ifgiven.yml
start_exporter sim --web.config.file ifgiven.yml
U=${URL/http:/https:}
expect 200 "no client certificate, none required" --cacert ca.crt "$U/metrics"
expect 000 "a client certificate the system does not trust" --cacert ca.crt --cert rogue.crt --key rogue.key "$U/metrics"
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true

# ---- rate_limit: 429 with Retry-After beyond the burst; probes never ----
printf "rate_limit:\n  interval: 2s\n  burst: 3\n" >limit.yml
start_exporter sim --web.config.file limit.yml --web.probe-listen-address 127.0.0.1:0
for i in 1 2 3; do expect 200 "request $i within the burst" "$URL"; done
hdrs=$(curl -s -D - -o /dev/null "$URL")
grep -q '^HTTP/1.1 429' <<<"$hdrs" || fail "request beyond the burst not 429: $hdrs"
grep -qiE '^Retry-After: [12]'$'\r''?$' <<<"$hdrs" || fail "429 without a Retry-After of 1-2 s: $hdrs"
for i in $(seq 1 20); do expect 200 "/-/healthy $i on the main port, never limited" "${URL%/metrics}/-/healthy"; done
P="http://127.0.0.1:$(grep -o 'on their own port(s) [0-9]*' "$TMP/exporter.log" | awk '{print $5}')"
for i in $(seq 1 5); do expect 200 "probe listener $i" "$P/-/healthy"; done
# A token comes every 2 s: the page then shows the refusal.
wait_for 10 has_metric 'xpu_exporter_http_requests_refused_total{reason="rate_limit"} [1-9]' ||
  fail "the rate_limit refusal is not counted"
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true

# ---- the file followed, no signal: a deleted user is refused within 2 s ----
A_HASH=$(echo 'a-pass' | "$PASSWD" --cost 6)
B_HASH=$(echo 'b-pass' | "$PASSWD" --cost 6)
printf "basic_auth_users:\n  alice: '%s'\n  bob: '%s'\n" "$A_HASH" "$B_HASH" >users.yml
start_exporter sim --web.config.file users.yml
expect 200 "bob before the edit" -u bob:b-pass "$URL"
# As an editor or the kubelet replaces it: a new file renamed over the old.
printf "basic_auth_users:\n  alice: '%s'\n" "$A_HASH" >users.yml.new
mv users.yml.new users.yml
edited=$(date +%s%N)
refused() { [ "$(curl -s -o /dev/null -w '%{http_code}' -u bob:b-pass "$URL")" = 401 ]; }
wait_for 5 refused || fail "a user deleted from the file is still served"
ms=$((($(date +%s%N) - edited) / 1000000))
[ "$ms" -le 2000 ] || fail "a deleted user refused only after $ms ms"
expect 200 "alice after the edit" -u alice:a-pass "$URL"
# An edit that does not load: the last good config serves, and says so.
printf "basic_auth_users: [\n" >users.yml
counted() { curl -s -u alice:a-pass "$URL/metrics" | grep -q '^xpu_exporter_web_config_reloads_total{result="failure"} 1$'; }
wait_for 5 counted || fail "an invalid edit is not counted"
grep -q "does not load; kept the config in force" "$TMP/exporter.log" || fail "an invalid edit is not logged"
expect 401 "bob under the last good config" -u bob:b-pass "$URL"
expect 200 "alice under the last good config" -u alice:a-pass "$URL"
echo "the web config file followed: a deleted user refused after $ms ms"
kill "$EXP_PID"; wait "$EXP_PID" 2>/dev/null || true

# ---- exporter-toolkit's own sample (docs/web-config.yml), relative files ----
mkdir -p sample
cp srv.crt sample/server.crt; cp srv.key sample/server.key
HASH=$(echo 'open sesame' | "$PASSWD" --cost 6)
printf "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  alice: '%s'\n" "$HASH" >sample/web-config.yml
out=$("$EXPORTER" --web.config.file sample/web-config.yml --config.check 2>&1) || fail "the format's sample refused: $out"

# ---- values the format calls invalid: one clear line, exit 2 ----
bad() {  # bad DESCRIPTION EXPECTED-TEXT YAML
  local what=$1 text=$2 out rc=0
  printf "%s" "$3" >bad.yml
  out=$("$EXPORTER" --web.listen-address 127.0.0.1:0 --hal none --web.config.file bad.yml 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 2 ] || fail "$what: exit $rc, want 2 ($out)"
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "$what: more than one line: $out"
  grep -qF -- "$text" <<<"$out" || fail "$what: message lacks '$text': $out"
}
PAIR="tls_server_config:\n  cert_file: $TMP/srv.crt\n  key_file: $TMP/srv.key\n"
bad "unknown cipher" "bad.yml:4: unknown cipher suite 'RC4'" "$(printf "$PAIR  cipher_suites: [RC4]\n")"
bad "unknown curve" "unknown curve 'P-256'" "$(printf "$PAIR  curve_preferences: [P-256]\n")"
bad "inline and file" "cert and cert_file are both set" "$(printf "$PAIR  cert: x\n")"
bad "SANs without a required certificate" "client_allowed_sans needs client_auth_type" \
  "$(printf "$PAIR  client_auth_type: VerifyClientCertIfGiven\n  client_allowed_sans: [a]\n")"
bad "X-Frame-Options" "invalid value 'DENY' for X-Frame-Options" \
  "$(printf "http_server_config:\n  headers:\n    X-Frame-Options: DENY\n")"
bad "X-Content-Type-Options" "expected nosniff" \
  "$(printf "http_server_config:\n  headers:\n    X-Content-Type-Options: none\n")"
bad "http2" "http2 must be true or false" "$(printf "http_server_config:\n  http2: sometimes\n")"
bad "rate_limit.interval" "rate_limit.interval 'often' is not a duration" \
  "$(printf "rate_limit:\n  interval: often\n  burst: 1\n")"
echo "web config verified"
