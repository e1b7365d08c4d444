# SHA-256 of the precompiled native artifacts attached to each release
# (artifact name => "sha256:<hex>", rustler_precompiled's format). Written by
# `mix ex_bashkit.package` and `mix ex_bashkit.checksum`; see RELEASING.md.
%{
}
