defmodule ExBashkit.Build.Precompiled do
  @moduledoc """
  Installs the precompiled artifact of this version, target and NIF version
  into `priv/native/`, checked against `checksum-Elixir.ExBashkit.Native.exs`.

  1. The checksum file must have an entry for the artifact, else
     `{:unavailable, ...}`.
  2. The tarball comes from the cache (`EX_BASHKIT_CACHE_DIR`, default the
     user cache dir, `ex_bashkit/`) when its SHA-256 matches the entry (a
     cached copy that does not is deleted), else from
     `EX_BASHKIT_BASE_URL/<artifact>` (default: this version's GitHub release
     downloads). No answer, or any status but 200, is `{:unavailable, ...}`.
  3. A download whose SHA-256 differs from the entry raises a Mix error that
     names the artifact and both checksums; nothing is cached or installed.
  4. A verified download that unpacks is cached, then its files are
     installed (`ExBashkit.Build.Install`).
  """

  alias ExBashkit.Build.{Artifact, Checksums, Download, Install, Target}

  @type config :: %{
          version: String.t(),
          target: String.t(),
          base_url: String.t(),
          cache_dir: Path.t(),
          checksum_file: Path.t(),
          native_dir: Path.t()
        }

  @typedoc "Why no artifact could be installed, for a fallback or an error message."
  @type unavailable :: %{
          reason: String.t(),
          artifact: String.t() | nil,
          url: String.t() | nil,
          quiet: boolean()
        }

  @doc "The configuration of the project being compiled, from its mix.exs and the environment."
  @spec config(keyword()) :: config()
  def config(project \\ Mix.Project.config()) do
    %{
      version: project[:version],
      target: Target.host(),
      base_url:
        String.trim_trailing(
          System.get_env("EX_BASHKIT_BASE_URL") || default_base_url(project),
          "/"
        ),
      cache_dir: System.get_env("EX_BASHKIT_CACHE_DIR") || default_cache_dir(),
      checksum_file: Checksums.default_path(),
      native_dir: "priv/native"
    }
  end

  @doc "Where a version's artifacts are published: its GitHub release."
  @spec default_base_url(keyword()) :: String.t()
  def default_base_url(project) do
    "#{project[:source_url]}/releases/download/v#{project[:version]}"
  end

  defp default_cache_dir, do: :filename.basedir(:user_cache, ~c"ex_bashkit") |> List.to_string()

  @doc """
  Installs the artifact. `{:ok, info}` once `priv/native/` holds it;
  `{:unavailable, why}` when there is no entry for it or it cannot be
  fetched. Raises on a checksum mismatch or a malformed artifact.
  """
  @spec install(config()) ::
          {:ok, %{artifact: String.t(), source: :cache | :download, written: [String.t()]}}
          | {:unavailable, unavailable()}
  def install(config) do
    with {:ok, nif} <- nif_version(),
         name = Artifact.name(config.version, nif, config.target),
         {:ok, expected} <- entry(config, name) do
      url = "#{config.base_url}/#{name}"
      cached = Path.join(config.cache_dir, name)

      fetched =
        case cached(cached, expected) do
          {:ok, tarball} -> {:ok, tarball, :cache}
          :miss -> download(url, name, expected)
        end

      case fetched do
        {:ok, tarball, source} ->
          files = unpack!(tarball, name, config, nif)
          if source == :download, do: cache(cached, tarball)
          written = Install.install!(config.native_dir, files)
          {:ok, %{artifact: name, source: source, written: written}}

        {:error, reason} ->
          {:unavailable,
           %{reason: "cannot download #{url}: #{reason}", artifact: name, url: url, quiet: false}}
      end
    end
  end

  defp nif_version do
    with {:error, reason} <- Target.nif_version() do
      {:unavailable, %{reason: reason, artifact: nil, url: nil, quiet: false}}
    end
  end

  defp entry(config, name) do
    sums = Checksums.read!(config.checksum_file)

    case Map.fetch(sums, name) do
      {:ok, entry} ->
        case Checksums.parse(entry, name) do
          {:ok, hex} -> {:ok, hex}
          {:error, reason} -> Mix.raise(reason)
        end

      :error ->
        # A version with no released artifact at all (a development version)
        # builds from source without a word; a released one says why.
        released? = Enum.any?(Map.keys(sums), &String.contains?(&1, "-v#{config.version}-nif-"))

        {:unavailable,
         %{
           reason: "#{Path.basename(config.checksum_file)} has no entry for #{name}",
           artifact: name,
           url: nil,
           quiet: not released?
         }}
    end
  end

  defp cached(path, expected) do
    case File.read(path) do
      {:ok, tarball} ->
        if sha256(tarball) == expected do
          {:ok, tarball}
        else
          Mix.shell().info(
            "ex_bashkit: cached #{path} does not match its checksum; downloading it again"
          )

          File.rm(path)
          :miss
        end

      {:error, _} ->
        :miss
    end
  end

  defp download(url, name, expected) do
    Mix.shell().info("ex_bashkit: downloading #{url}")

    with {:ok, tarball} <- Download.get(url) do
      actual = sha256(tarball)

      if actual != expected do
        Mix.raise("""
        checksum mismatch for the precompiled artifact #{name} (from #{url}):
          expected sha256:#{expected}
          actual   sha256:#{actual}
        Nothing was installed or cached. The file on the server is not the one
        the checksum file lists: check EX_BASHKIT_BASE_URL, or build from source
        with EX_BASHKIT_BUILD=1 (needs Rust/cargo).
        """)
      end

      {:ok, tarball, :download}
    end
  end

  # A cache that cannot be written costs a download next time, nothing more.
  defp cache(path, tarball) do
    tmp = path <> ".tmp#{System.unique_integer([:positive])}"

    with :ok <- File.mkdir_p(Path.dirname(path)),
         :ok <- File.write(tmp, tarball),
         :ok <- File.rename(tmp, path) do
      :ok
    else
      {:error, reason} ->
        File.rm(tmp)
        Mix.shell().info("ex_bashkit: cannot cache #{path}: #{:file.format_error(reason)}")
    end
  end

  defp unpack!(tarball, name, config, nif) do
    case Artifact.unpack(tarball, config.version, nif, config.target) do
      {:ok, files} -> files
      {:error, reason} -> Mix.raise("the precompiled artifact #{name} is malformed: #{reason}")
    end
  end

  defp sha256(data), do: Base.encode16(:crypto.hash(:sha256, data), case: :lower)
end
