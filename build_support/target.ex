defmodule ExBashkit.Build.Target do
  @moduledoc """
  The Rust target triple and NIF version a precompiled artifact is built for.

  Both follow `rustler_precompiled`, so that its artifact names and ours are
  the same:

  - the host triple comes from `:erlang.system_info(:system_architecture)`
    (`x86_64-pc-linux-gnu` -> `x86_64-unknown-linux-gnu`, `aarch64-apple-darwin23.1.0`
    -> `aarch64-apple-darwin`, Alpine's `x86_64-alpine-linux-musl` ->
    `x86_64-unknown-linux-musl`; Windows is `<arch>-pc-windows-msvc`);
  - the NIF version is the newest one the crate is built for whose major is
    the VM's and whose minor is not above the VM's (a NIF built for 2.16
    loads on OTP 26's 2.17).
  """

  # The crate enables rustler's `nif_version_2_16` feature (Cargo.toml).
  @nif_versions ["2.16"]

  # What .github/workflows/release.yml builds and attaches to each release.
  @release_targets ~w(
    x86_64-unknown-linux-gnu
    aarch64-unknown-linux-gnu
    x86_64-unknown-linux-musl
    aarch64-unknown-linux-musl
    x86_64-apple-darwin
    aarch64-apple-darwin
    x86_64-pc-windows-msvc
  )

  @doc "The NIF versions the crate is built for."
  @spec nif_versions() :: [String.t()]
  def nif_versions, do: @nif_versions

  @doc "The targets every release carries an artifact for."
  @spec release_targets() :: [String.t()]
  def release_targets, do: @release_targets

  @doc "The Rust target triple of the machine this VM runs on."
  @spec host() :: String.t()
  def host do
    case :os.type() do
      {:win32, _} ->
        arch = if :erlang.system_info(:wordsize) == 8, do: "x86_64", else: "i686"
        "#{arch}-pc-windows-msvc"

      {:unix, _} ->
        :erlang.system_info(:system_architecture)
        |> List.to_string()
        |> from_system_architecture()
    end
  end

  @doc """
  Maps an Erlang system architecture string to a Rust target triple.

      from_system_architecture("x86_64-pc-linux-gnu")       #=> "x86_64-unknown-linux-gnu"
      from_system_architecture("x86_64-alpine-linux-musl")  #=> "x86_64-unknown-linux-musl"
      from_system_architecture("aarch64-apple-darwin23.1.0") #=> "aarch64-apple-darwin"
  """
  @spec from_system_architecture(String.t()) :: String.t()
  def from_system_architecture(arch_string) do
    case String.split(arch_string, "-") do
      [arch, _vendor, "darwin" <> _ | _] ->
        "#{if arch == "arm", do: "aarch64", else: arch}-apple-darwin"

      [arch, _vendor, "linux" | abi] ->
        "#{if arch == "amd64", do: "x86_64", else: arch}-unknown-linux-#{List.first(abi, "gnu")}"

      _ ->
        arch_string
    end
  end

  @doc """
  The NIF version of the artifact to use on a VM whose NIF version is
  `runtime` (default: this VM's).
  """
  @spec nif_version(String.t()) :: {:ok, String.t()} | {:error, String.t()}
  def nif_version(runtime \\ List.to_string(:erlang.system_info(:nif_version))) do
    [major, minor] = parse(runtime)

    @nif_versions
    |> Enum.filter(fn v -> match?([^major, m] when m <= minor, parse(v)) end)
    |> Enum.max_by(&parse/1, fn -> nil end)
    |> case do
      nil ->
        {:error,
         "no precompiled NIF for NIF version #{runtime} (built for #{Enum.join(@nif_versions, ", ")})"}

      version ->
        {:ok, version}
    end
  end

  defp parse(version) do
    version |> String.split(".") |> Enum.take(2) |> Enum.map(&String.to_integer/1)
  end

  @doc "Whether `target` is a Windows triple."
  @spec windows?(String.t()) :: boolean()
  def windows?(target), do: String.contains?(target, "windows")

  @doc "Whether `target` is a macOS triple."
  @spec darwin?(String.t()) :: boolean()
  def darwin?(target), do: String.contains?(target, "darwin")

  @doc "The suffix of executables on `target` (`.exe` on Windows)."
  @spec exe_suffix(String.t()) :: String.t()
  def exe_suffix(target), do: if(windows?(target), do: ".exe", else: "")
end
