#!/usr/bin/env bash
# What crates.io and docs.rs would do with the three crates:
# 1. the API docs of each crate, every feature on, without one rustdoc warning (broken or
#    private links, bad HTML, ...);
# 2. `cargo package` of the three together, each verified by building the packaged sources on
#    their own: tollgate-redis and tollgate-tower against the packaged tollgate (cargo packages
#    workspace members together and resolves them from the local packages), so a file missing
#    from a package or a path dependency without a version fails here. Then each file list is
#    printed with the package's size.
# Budget: ≤ 2 min after the stages before it (the verification builds the packaged crates with
# their own lockfile's features: a few dependencies again, ~5 min on a cold target dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
crates=(tollgate tollgate-redis tollgate-tower)
packages=()
for c in "${crates[@]}"; do packages+=(-p "$c"); done

echo "--- cargo doc, every feature, warnings denied"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features "${packages[@]}"

echo "--- cargo package, verified"
# Verification builds each crate against the others' packaged copies, which cargo unpacks into a
# local registry named after target/package ("-<hash>" under registry/src) and never unpacks
# again: a copy left there by an earlier package run of the same checkout path would stand in
# for today's sources. Remove only those local copies of these crates.
for c in "${crates[@]}"; do
  rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/"$c"-[0-9]*
done
cargo package "${packages[@]}"
for c in "${crates[@]}"; do
  version=$(cargo pkgid -p "$c" | sed 's/.*[@#]//')
  crate_file=target/package/${c}-${version}.crate
  echo "--- ${c} ${version}: $(tar -tzf "$crate_file" | grep -vc '/$') files, $(du -k "$crate_file" | cut -f1) KiB compressed"
  cargo package --list -p "$c" | sed 's/^/    /'
done
