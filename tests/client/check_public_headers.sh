#!/usr/bin/env bash
# The client's public headers include no gRPC or generated protobuf header,
# directly or through another: each is preprocessed alone and the headers it
# pulls in (`-H`) are searched.
# Usage: check_public_headers.sh CXX SOURCE_DIR
set -uo pipefail
cxx=$1
root=$2
status=0
for header in client/ps_client.h client/shard_client.h client/serving_client.h; do
  if ! tree=$(echo "#include \"$header\"" |
      "$cxx" -std=c++17 -I"$root" -x c++ -E -H - 2>&1 >/dev/null); then
    echo "$header does not preprocess alone:"
    echo "$tree" | tail -5
    status=1
    continue
  fi
  found=$(grep -E '^\.+ .*(grpcpp/|grpc/|\.pb\.h|google/protobuf/)' <<<"$tree")
  if [[ -n "$found" ]]; then
    echo "$header includes gRPC or protobuf headers:"
    echo "$found" | head -5
    status=1
  else
    echo "$header: $(grep -c '^\.' <<<"$tree") headers, none of gRPC or protobuf"
  fi
done
exit $status
