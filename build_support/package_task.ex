defmodule Mix.Tasks.ExBashkit.Package do
  @shortdoc "Builds this host's precompiled artifact and records its checksum"

  @moduledoc """
  Builds the NIF (and every executable of the crate) from source,
  writes the precompiled artifact for this target into a directory, and adds
  or updates its line in `checksum-Elixir.ExBashkit.Native.exs`.

      mix ex_bashkit.package [--out DIR] [--target TRIPLE] [--checksum-file FILE] [--profile NAME]

  - `--out DIR`: where the artifact goes (default `artifacts/`).
  - `--target TRIPLE`: cross-build for another Rust target
    (`cargo build --target`; the toolchain must have it). Default: the host,
    named as the compiler names it when it looks for a download.
  - `--checksum-file FILE`: the checksum file to update (default the
    project's).
  - `--profile NAME`: the cargo profile (default `dist`: the release
    profile with thin LTO, see `native/ex_bashkit/Cargo.toml`).

  Needs cargo; ignores `EX_BASHKIT_BUILD` (it always builds). The release
  workflow runs it once per target; see RELEASING.md.
  """

  use Mix.Task

  alias ExBashkit.Build.{Artifact, Checksums, SourceBuild, Target}

  @switches [out: :string, target: :string, checksum_file: :string, profile: :string]

  @impl true
  def run(args) do
    {opts, rest} = OptionParser.parse!(args, strict: @switches)
    if rest != [], do: Mix.raise("unexpected arguments: #{Enum.join(rest, " ")}")

    cargo = System.find_executable("cargo") || Mix.raise("cargo not found on PATH: install Rust")
    version = Mix.Project.config()[:version]
    target = opts[:target] || Target.host()
    # Artifacts are named by the NIF version the crate is built for.
    nif = List.last(Target.nif_versions())

    files =
      SourceBuild.build!(
        cargo: cargo,
        profile: opts[:profile] || "dist",
        target: if(target == Target.host(), do: nil, else: target)
      )

    name = Artifact.name(version, nif, target)
    out = Path.join(opts[:out] || "artifacts", name)
    Artifact.pack!(files, out, version, nif, target)

    checksum = Checksums.of(File.read!(out))
    checksum_file = opts[:checksum_file] || Checksums.default_path()
    Checksums.put!(checksum_file, name, checksum)

    Mix.shell().info("""
    #{out}
      #{checksum}
      carries #{Enum.map_join(files, ", ", &elem(&1, 0))}
      recorded in #{checksum_file}
    """)
  end
end
