defmodule ExBashkit.Build.Artifact do
  @moduledoc """
  A precompiled artifact: its name, and the tarball that carries every native
  part of the package for one target.

  Names and layout are `rustler_precompiled`'s, so that switching to it is a
  one-line change:

  - the artifact is `libex_bashkit-v<version>-nif-<nif>-<target>.so.tar.gz`
    (`ex_bashkit-v...-<target>.dll.tar.gz` on Windows: `rustler_precompiled`
    drops the `lib` prefix there);
  - inside, the NIF library sits under the artifact's name without `.tar.gz`
    (the file `rustler_precompiled` loads), next to every executable the crate
    builds (`ex_bashkit_worker`), mode 0755, no directories.

  Unpacked here, the library is installed as `ex_bashkit.so` (`.dll` on
  Windows), the name `ExBashkit.Native` loads; executables keep their names.
  """

  alias ExBashkit.Build.Target

  @crate "ex_bashkit"

  @doc """
  The artifact's file name.

      name("0.1.0", "2.16", "x86_64-unknown-linux-gnu")
      #=> "libex_bashkit-v0.1.0-nif-2.16-x86_64-unknown-linux-gnu.so.tar.gz"
  """
  @spec name(String.t(), String.t(), String.t()) :: String.t()
  def name(version, nif_version, target), do: lib_entry(version, nif_version, target) <> ".tar.gz"

  @doc "The name of the NIF library inside the artifact."
  @spec lib_entry(String.t(), String.t(), String.t()) :: String.t()
  def lib_entry(version, nif_version, target) do
    {prefix, ext} = if Target.windows?(target), do: {"", "dll"}, else: {"lib", "so"}
    "#{prefix}#{@crate}-v#{version}-nif-#{nif_version}-#{target}.#{ext}"
  end

  @doc "The file name `ExBashkit.Native` loads the NIF from, in `priv/native/`."
  @spec installed_lib(String.t()) :: String.t()
  def installed_lib(target),
    do: if(Target.windows?(target), do: "#{@crate}.dll", else: "#{@crate}.so")

  @doc """
  Writes the artifact for `files` (`[{installed_name, path}]`, the library
  under `installed_lib(target)`) to `out_path`, atomically.
  """
  @spec pack!([{String.t(), Path.t()}], Path.t(), String.t(), String.t(), String.t()) :: :ok
  def pack!(files, out_path, version, nif_version, target) do
    lib = installed_lib(target)

    entry_for = fn name ->
      if name == lib, do: lib_entry(version, nif_version, target), else: name
    end

    unless List.keymember?(files, lib, 0), do: Mix.raise("no NIF library (#{lib}) to package")

    staging =
      Path.join(System.tmp_dir!(), "ex_bashkit_pack_#{System.unique_integer([:positive])}")

    File.mkdir_p!(staging)
    File.mkdir_p!(Path.dirname(out_path))
    tmp = out_path <> ".tmp#{System.unique_integer([:positive])}"

    try do
      # Entries are copied into a staging dir first so that the tarball records
      # mode 0755 whatever the build left, and the names the artifact uses.
      entries =
        for {name, path} <- files do
          entry = entry_for.(name)
          staged = Path.join(staging, entry)
          File.cp!(path, staged)
          File.chmod!(staged, 0o755)
          {String.to_charlist(entry), String.to_charlist(staged)}
        end

      case :erl_tar.create(String.to_charlist(tmp), entries, [:compressed]) do
        :ok -> File.rename!(tmp, out_path)
        {:error, reason} -> Mix.raise("cannot write #{out_path}: #{inspect(reason)}")
      end
    after
      File.rm_rf(staging)
      File.rm(tmp)
    end

    :ok
  end

  @doc """
  The files an artifact carries, as `[{installed_name, content}]`, the library
  first and renamed to `installed_lib(target)`. Fails on anything but plain
  files with plain names, or without the library.
  """
  @spec unpack(binary(), String.t(), String.t(), String.t()) ::
          {:ok, [{String.t(), binary()}]} | {:error, String.t()}
  def unpack(tarball, version, nif_version, target) do
    lib_entry = lib_entry(version, nif_version, target)

    with {:ok, entries} <- extract(tarball),
         entries = Enum.map(entries, fn {name, content} -> {List.to_string(name), content} end),
         :ok <- check_names(entries),
         {:ok, lib} <- fetch_lib(entries, lib_entry) do
      others = for {name, content} <- entries, name != lib_entry, do: {name, content}
      {:ok, [{installed_lib(target), lib} | others]}
    end
  end

  defp extract(tarball) do
    case :erl_tar.extract({:binary, tarball}, [:compressed, :memory]) do
      {:ok, entries} -> {:ok, entries}
      {:error, reason} -> {:error, "not a gzipped tar archive (#{inspect(reason)})"}
    end
  end

  defp check_names(entries) do
    names = Enum.map(entries, &elem(&1, 0))

    cond do
      (bad = Enum.reject(names, &plain_name?/1)) != [] ->
        {:error, "entries with unsafe names: #{inspect(bad)}"}

      length(names) != length(Enum.uniq(names)) ->
        {:error, "duplicate entries"}

      true ->
        :ok
    end
  end

  defp plain_name?(name) do
    name not in ["", ".", ".."] and not String.contains?(name, ["/", "\\", <<0>>])
  end

  defp fetch_lib(entries, lib_entry) do
    case List.keyfind(entries, lib_entry, 0) do
      {_, content} -> {:ok, content}
      nil -> {:error, "no #{lib_entry} inside"}
    end
  end
end
