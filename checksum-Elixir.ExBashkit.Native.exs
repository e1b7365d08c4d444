# SHA-256 of the precompiled NIF artifacts attached to each release by
# .github/workflows/release.yml (file name => "sha256:<hex>"). Empty until the
# first release; builds from source (the default here) do not use it.
%{}
