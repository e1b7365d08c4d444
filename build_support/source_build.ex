defmodule ExBashkit.Build.SourceBuild do
  @moduledoc """
  Builds the crate `native/ex_bashkit` with cargo and names the files it
  produced: the NIF library and every executable (`bin` target) of the
  crate, such as the session worker `ex_bashkit_worker`.

  The same list feeds `priv/native/` (the compiler) and the artifact
  (`mix ex_bashkit.package`), so an artifact always carries every native
  part the package runs.

  Executables are read from `Cargo.toml` the way cargo finds them:
  `[[bin]]` sections, `src/main.rs`, `src/bin/<name>.rs` and
  `src/bin/<name>/main.rs` (unless `autobins = false`).
  """

  alias ExBashkit.Build.{Artifact, CargoOutput, Target}

  @crate "native/ex_bashkit"
  @lib "ex_bashkit"

  @doc """
  Runs `cargo build` and returns `[{installed_name, built_path}]`, the
  library first. Options: `:cargo` (path), `:profile` (a cargo profile:
  `"release"`, default, `"debug"`, or one of `Cargo.toml`'s such as
  `"dist"`), `:target` (a Rust triple to cross-build for; default the host,
  built without `--target`).
  """
  @spec build!(keyword()) :: [{String.t(), Path.t()}]
  def build!(opts \\ []) do
    cargo = Keyword.fetch!(opts, :cargo)
    profile = Keyword.get(opts, :profile, "release")
    cross = Keyword.get(opts, :target)
    target = cross || Target.host()

    args =
      ["build", "--manifest-path", Path.join(@crate, "Cargo.toml")] ++
        profile_args(profile) ++
        if(cross, do: ["--target", cross], else: [])

    # A no-op build's closing line dropped (`CargoOutput`).
    case CargoOutput.run(cargo, args) do
      0 -> :ok
      code -> Mix.raise("cargo build failed (exit #{code})")
    end

    out_dir = Path.join(Enum.reject([target_dir(), cross, profile], &is_nil/1))

    files = [
      {Artifact.installed_lib(target), Path.join(out_dir, built_lib(target))}
      | for(
          bin <- bin_names(),
          do:
            {bin <> Target.exe_suffix(target),
             Path.join(out_dir, bin <> Target.exe_suffix(target))}
        )
    ]

    for {_, path} <- files, not File.regular?(path) do
      Mix.raise("cargo build succeeded but #{path} is missing")
    end

    files
  end

  # `debug` is cargo's `dev` profile, built without a flag; every profile
  # builds into the target directory's folder of the name used here.
  defp profile_args("release"), do: ["--release"]
  defp profile_args("debug"), do: []
  defp profile_args(profile), do: ["--profile", profile]

  defp target_dir, do: System.get_env("CARGO_TARGET_DIR") || Path.join(@crate, "target")

  defp built_lib(target) do
    cond do
      Target.windows?(target) -> "#{@lib}.dll"
      Target.darwin?(target) -> "lib#{@lib}.dylib"
      true -> "lib#{@lib}.so"
    end
  end

  @doc "The names of the crate's executables, from its `Cargo.toml` and `src/`."
  @spec bin_names(Path.t()) :: [String.t()]
  def bin_names(crate \\ @crate) do
    sections = crate |> Path.join("Cargo.toml") |> File.read!() |> sections()
    package = sections |> section("[package]") |> value("name")

    explicit =
      for {"[[bin]]", body} <- sections do
        name = value(body, "name")
        {name, Path.expand(value(body, "path") || default_bin_path(crate, name, package), crate)}
      end

    auto =
      if sections |> section("[package]") |> value("autobins") == "false" do
        []
      else
        main =
          if File.regular?(Path.join(crate, "src/main.rs")),
            do: [{package, "src/main.rs"}],
            else: []

        files =
          for file <- Path.wildcard(Path.join(crate, "src/bin/*.rs")),
              do: {Path.basename(file, ".rs"), Path.relative_to(file, crate)}

        dirs =
          for file <- Path.wildcard(Path.join(crate, "src/bin/*/main.rs")),
              do: {file |> Path.dirname() |> Path.basename(), Path.relative_to(file, crate)}

        for {name, path} <- main ++ files ++ dirs, do: {name, Path.expand(path, crate)}
      end

    # An explicit [[bin]] that names a file cargo would find anyway replaces it.
    taken = for {_, path} <- explicit, do: path

    (Enum.map(explicit, &elem(&1, 0)) ++
       for({name, path} <- auto, path not in taken, do: name))
    |> Enum.uniq()
  end

  defp default_bin_path(crate, name, package) do
    if name == package and File.regular?(Path.join(crate, "src/main.rs")),
      do: "src/main.rs",
      else: "src/bin/#{name}.rs"
  end

  # TOML, just enough of it: `[header]` lines split the file into sections.
  defp sections(toml) do
    toml
    |> String.split("\n")
    |> Enum.reduce([{"", []}], fn line, [{header, lines} | rest] = acc ->
      case String.trim(line) do
        "[" <> _ = h -> [{h |> String.split("#") |> hd() |> String.replace(~r/\s/, ""), []} | acc]
        _ -> [{header, [line | lines]} | rest]
      end
    end)
    |> Enum.map(fn {header, lines} -> {header, lines |> Enum.reverse() |> Enum.join("\n")} end)
    |> Enum.reverse()
  end

  defp section(sections, header) do
    Enum.find_value(sections, "", fn {h, body} -> if h == header, do: body end)
  end

  defp value(body, key) do
    case Regex.run(~r/^\s*#{key}\s*=\s*"?([^"\n#]*?)"?\s*(#.*)?$/m, body) do
      [_, v | _] -> String.trim(v)
      nil -> nil
    end
  end
end
