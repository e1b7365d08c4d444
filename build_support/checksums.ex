defmodule ExBashkit.Build.Checksums do
  @moduledoc """
  `checksum-Elixir.ExBashkit.Native.exs`: the SHA-256 of every released
  artifact, as `rustler_precompiled` writes it (a map of artifact name =>
  `"sha256:<lowercase hex>"`).

  The file is read as a literal, never evaluated: anything but a map of
  strings to strings is an error.
  """

  @file_name "checksum-Elixir.ExBashkit.Native.exs"

  @header """
  # SHA-256 of the precompiled native artifacts attached to each release
  # (artifact name => "sha256:<hex>", rustler_precompiled's format). Written by
  # `mix ex_bashkit.package` and `mix ex_bashkit.checksum`; see RELEASING.md.
  """

  @doc "The checksum file of the project being built (in its root)."
  @spec default_path() :: Path.t()
  def default_path, do: Path.join(File.cwd!(), @file_name)

  @doc "`\"sha256:<hex>\"` of `data`."
  @spec of(iodata()) :: String.t()
  def of(data), do: "sha256:" <> Base.encode16(:crypto.hash(:sha256, data), case: :lower)

  @doc "Reads the map; a missing file is an empty map."
  @spec read(Path.t()) :: {:ok, %{String.t() => String.t()}} | {:error, String.t()}
  def read(path) do
    with {:ok, text} <- read_text(path),
         {:ok, {:%{}, _, pairs}} <- Code.string_to_quoted(text),
         true <- Enum.all?(pairs, &match?({k, v} when is_binary(k) and is_binary(v), &1)) do
      {:ok, Map.new(pairs)}
    else
      {:error, reason} when is_binary(reason) -> {:error, reason}
      _ -> {:error, "#{path} is not a map of artifact names to \"sha256:<hex>\" strings"}
    end
  end

  defp read_text(path) do
    case File.read(path) do
      {:ok, text} -> {:ok, text}
      {:error, :enoent} -> {:ok, "%{}"}
      {:error, reason} -> {:error, "cannot read #{path}: #{:file.format_error(reason)}"}
    end
  end

  @doc "Reads the map or raises a Mix error."
  @spec read!(Path.t()) :: %{String.t() => String.t()}
  def read!(path) do
    case read(path) do
      {:ok, map} -> map
      {:error, reason} -> Mix.raise(reason)
    end
  end

  @doc "Writes `map` as the whole file, entries sorted by name (atomically)."
  @spec write!(Path.t(), %{String.t() => String.t()}) :: :ok
  def write!(path, map) do
    lines = for {name, sum} <- Enum.sort(map), do: ~s(  #{inspect(name)} => #{inspect(sum)},\n)
    tmp = path <> ".tmp#{System.unique_integer([:positive])}"
    File.write!(tmp, [@header, "%{\n", lines, "}\n"])
    File.rename!(tmp, path)
  end

  @doc "Adds or replaces one entry, keeping the others."
  @spec put!(Path.t(), String.t(), String.t()) :: :ok
  def put!(path, name, checksum), do: write!(path, Map.put(read!(path), name, checksum))

  @doc "The hex digest of a `\"sha256:<hex>\"` entry, or an error naming the artifact."
  @spec parse(String.t(), String.t()) :: {:ok, String.t()} | {:error, String.t()}
  def parse("sha256:" <> hex = entry, name) do
    if byte_size(hex) == 64 and hex =~ ~r/\A[0-9a-fA-F]+\z/,
      do: {:ok, String.downcase(hex)},
      else: {:error, "malformed checksum for #{name}: #{inspect(entry)}"}
  end

  def parse(entry, name),
    do:
      {:error, "unsupported checksum for #{name}: #{inspect(entry)} (expected \"sha256:<hex>\")"}
end
