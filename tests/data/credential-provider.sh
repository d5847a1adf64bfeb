#!/bin/sh
# A credential provider plugin for the tests (sh and coreutils only). Each run saves its
# request (the CredentialProviderRequest JSON from stdin) as a new file in
# $RECORD_DIR, so a test counts runs and reads what oxlet sent; then it fails with
# $FAIL on stderr, or answers with the login $USERNAME/$PASSWORD for $REGISTRY, keyed
# by $CACHE_KEY_TYPE, with $CACHE_DURATION when set.
set -eu
request="$RECORD_DIR/request-$(date +%s%N)-$$.json"
cat > "$request"
if [ -n "${FAIL:-}" ]; then
    echo "$FAIL" >&2
    exit 1
fi
duration=""
if [ -n "${CACHE_DURATION:-}" ]; then
    duration="\"cacheDuration\":\"$CACHE_DURATION\","
fi
printf '{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"%s",%s"auth":{"%s":{"username":"%s","password":"%s"}}}\n' \
    "$CACHE_KEY_TYPE" "$duration" "$REGISTRY" "$USERNAME" "$PASSWORD"
