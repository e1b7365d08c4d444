defmodule ExBashkit.Properties.FsModelTest do
  # Model-based: random sequences of filesystem API calls and equivalent
  # script commands, checked step by step against a simple model of paths and
  # contents (ExBashkit.Test.FsModel), then as a whole tree, through the API
  # and through `find`.
  use ExUnit.Case, async: true
  use ExBashkit.Test.Property

  alias ExBashkit.Session
  alias ExBashkit.Test.FsModel

  property "the API and scripts agree with the model", quick: 150, heavy: 5_000 do
    forall(FsModel.ops(), fn ops ->
      s = Session.new()
      :ok = Session.mkdir(s, FsModel.root())

      model =
        ops
        |> Enum.with_index(1)
        |> Enum.reduce(FsModel.new(), fn {op, step}, model ->
          {expected, next} = FsModel.expect(model, op)
          observed = FsModel.run(s, op)

          if observed != expected do
            raise """
            step #{step}: #{inspect(op)}
              expected #{inspect(expected)}
              observed #{inspect(observed)}
            model before: #{inspect(model)}
            """
          end

          next
        end)

      tree = FsModel.observe(s)

      tree == model or
        raise "final tree differs:\n model #{inspect(model)}\n  tree #{inspect(tree)}"

      find = FsModel.observe_sh(s)
      find == Enum.sort(Map.keys(model)) or raise "find /m differs: #{inspect(find)}"
    end)
  end

  property "`.`, `//` and `..` above / resolve to the same file, via the API and scripts",
    quick: 100,
    heavy: 5_000 do
    forall(:proper_types.tuple([FsModel.spelled_path(), :proper_types.binary()]), fn {{path,
                                                                                       spelling},
                                                                                      data} ->
      s = Session.new()
      :ok = Session.write_file(s, spelling, data)

      {:ok, ^data} = Session.read_file(s, path)
      {:ok, ^data} = Session.read_file(s, spelling)
      {:ok, %{type: :file}} = Session.stat(s, spelling)
      {:ok, %{stdout: ^data, exit_code: 0}} = Session.exec(s, "cat '#{spelling}'")
      parent = Path.dirname(path) <> "\n"
      {:ok, %{stdout: ^parent}} = Session.exec(s, "cd \"$(dirname '#{spelling}')\" && pwd")
      # Nothing was created anywhere but under /m.
      {:ok, top} = Session.list_dir(s, "/")
      Enum.member?(top, {"m", :dir}) or raise "no /m at the top: #{inspect(top)}"
    end)
  end
end
