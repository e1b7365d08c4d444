# Sourced by the benchmark scripts: takes `--profile P` out of the
# arguments (the rest are left in `args`) and exports it as
# EX_BASHKIT_CARGO_PROFILE, the NIF's build profile (build_support), so that
# the NIF, the raw harness and the bare NIF are all built alike.
# `cargo_profile` holds cargo's flags for it (`debug` is cargo's `dev`).
profile="${EX_BASHKIT_CARGO_PROFILE:-release}"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$profile" in
  release) cargo_profile=(--release) ;;
  debug) cargo_profile=() ;;
  *) cargo_profile=(--profile "$profile") ;;
esac
export EX_BASHKIT_CARGO_PROFILE="$profile"
