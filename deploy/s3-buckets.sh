#!/bin/sh
# Creates the buckets docker-compose.yml's imgcas services need, through the S3 API with their
# own key: a bucket that exists is left alone, so running it again changes nothing. Exits 0
# once every bucket answers, 1 if one still does not after about a minute (the S3 server may
# take a few seconds past its health check before it accepts writes).
#
# Environment: S3_ENDPOINT (http://host:port), S3_REGION, BUCKETS (space-separated),
# AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Needs curl 7.75 or later (SigV4 signing).
set -u
sign="aws:amz:${S3_REGION}:s3"
key="${AWS_ACCESS_KEY_ID}:${AWS_SECRET_ACCESS_KEY}"
for bucket in $BUCKETS; do
  tries=0
  # HEAD first: a create of an existing bucket is an error (409) on most S3 servers.
  until curl -fsS -o /dev/null --head --aws-sigv4 "$sign" --user "$key" "$S3_ENDPOINT/$bucket" 2>/dev/null ||
    curl -fsS -o /dev/null -X PUT --aws-sigv4 "$sign" --user "$key" "$S3_ENDPOINT/$bucket"; do
    tries=$((tries + 1))
    if [ "$tries" -ge 30 ]; then
      echo "bucket $bucket: not created at $S3_ENDPOINT" >&2
      exit 1
    fi
    sleep 2
  done
  echo "bucket $bucket: ready"
done
