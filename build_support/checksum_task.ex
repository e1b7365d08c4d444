defmodule Mix.Tasks.ExBashkit.Checksum do
  @shortdoc "Downloads every release artifact of a version and writes the checksum file"

  @moduledoc """
  Fetches the precompiled artifact of every release target
  (`ExBashkit.Build.Target.release_targets/0`) for a version and rewrites
  `checksum-Elixir.ExBashkit.Native.exs` with their SHA-256: the step of the
  release checklist (RELEASING.md) that runs after the release workflow has
  uploaded the artifacts and before the package is published.

      mix ex_bashkit.checksum [--version V] [--base-url URL] [--checksum-file FILE] [--ignore-missing]

  - `--version`: default the project's version.
  - `--base-url`: default `EX_BASHKIT_BASE_URL`, else the version's GitHub
    release downloads.
  - `--ignore-missing`: leave out targets whose artifact cannot be fetched
    (default: any missing artifact is an error and nothing is written).
  """

  use Mix.Task

  alias ExBashkit.Build.{Artifact, Checksums, Download, Precompiled, Target}

  @switches [
    version: :string,
    base_url: :string,
    checksum_file: :string,
    ignore_missing: :boolean
  ]

  @impl true
  def run(args) do
    {opts, rest} = OptionParser.parse!(args, strict: @switches)
    if rest != [], do: Mix.raise("unexpected arguments: #{Enum.join(rest, " ")}")

    project = Mix.Project.config()
    version = opts[:version] || project[:version]

    base_url =
      (opts[:base_url] || System.get_env("EX_BASHKIT_BASE_URL") ||
         Precompiled.default_base_url(Keyword.put(project, :version, version)))
      |> String.trim_trailing("/")

    wanted =
      for target <- Target.release_targets(),
          nif <- Target.nif_versions(),
          do: {Artifact.name(version, nif, target), nif, target}

    results =
      wanted
      |> Task.async_stream(&fetch(&1, version, base_url), max_concurrency: 4, timeout: :infinity)
      |> Enum.map(fn {:ok, result} -> result end)

    missing = for {name, {:error, reason}} <- results, do: "  #{name}: #{reason}"

    if missing != [] and not Keyword.get(opts, :ignore_missing, false) do
      Mix.raise(
        "cannot fetch from #{base_url}:\n#{Enum.join(missing, "\n")}\nNothing was written."
      )
    end

    sums = for {name, {:ok, tarball}} <- results, into: %{}, do: {name, Checksums.of(tarball)}
    path = opts[:checksum_file] || Checksums.default_path()
    Checksums.write!(path, sums)

    for {name, sum} <- Enum.sort(sums), do: Mix.shell().info("#{sum}  #{name}")
    for line <- missing, do: Mix.shell().info("skipped#{line}")
    Mix.shell().info("wrote #{map_size(sums)} entries to #{path}")
  end

  # An artifact that does not unpack to the NIF library is an error too: the
  # checksum file must never vouch for it.
  defp fetch({name, nif, target}, version, base_url) do
    with {:ok, tarball} <- Download.get("#{base_url}/#{name}"),
         {:ok, _files} <- Artifact.unpack(tarball, version, nif, target) do
      {name, {:ok, tarball}}
    else
      {:error, reason} -> {name, {:error, reason}}
    end
  end
end
