defmodule ExBashkit.Test.Gen do
  @moduledoc false
  # PropEr generators for the property tests: scripts (grammar-built and
  # mutated), raw bytes, and random `ExBashkit.Session.new/1` options.
  #
  # Everything here is built with `:proper_types` functions (Elixir cannot use
  # PropEr's macros): `bind/3` is `?LET`, `sized/1` is `?SIZED`, `lazy/1` is
  # `?LAZY`. Elixir maps and funs are not PropEr "raw types", so they are
  # always produced inside `bind/3` or wrapped in `exactly/1`.

  alias :proper_types, as: T

  # -- small combinators ------------------------------------------------------

  @doc "Concatenate the strings the generators in `parts` produce."
  def cat(parts), do: T.bind(T.fixed_list(parts), &T.exactly(Enum.join(&1)), false)

  @doc "`?LET(x, gen, f(x))` where `f` returns a plain value."
  def map(gen, fun), do: T.bind(gen, &T.exactly(fun.(&1)), false)

  @doc "A constant (any term, including funs and maps)."
  def const(value), do: T.exactly(value)

  # -- bytes and text -----------------------------------------------------------

  def bytes, do: T.binary()

  def utf8, do: :proper_unicode.utf8()

  # Single-quoted shell word for arbitrary text.
  defp quoted(text), do: "'" <> String.replace(text, "'", "'\\''") <> "'"

  # -- scripts ------------------------------------------------------------------

  # Commands a script may run. Every one of them is bounded by the session
  # limits or finishes on its own; none redefines `echo` or redirects the
  # shell's own output persistently, so "echo alive" afterwards is meaningful.
  # `sleep` is left out on purpose: `sleep N &` outliving the timeout poisons
  # the session (a bashkit bug with its own reproducer in
  # test/reliability/known_issues_test.exs), which would make these
  # properties fail at random instead of pointing at the bug.
  @commands ~w(echo printf cat ls cd pwd export unset test [ true false read
    local shift wc grep sed awk sort uniq head tail tr cut : eval type declare
    let seq base64 basename dirname env printenv return break continue getopts
    pushd popd dirs mkdir touch rm cp mv ln stat find xargs jq tee rev nl od
    md5sum sha256sum date wait kill jobs alias unalias hash umask command
    builtin bash sh source expr bc printf mapfile readarray compgen)

  @words [
    "x",
    "y",
    "$x",
    "\"$x\"",
    "'a b'",
    "${x:-d}",
    "${x:=d}",
    "${x#a}",
    "${x%%b}",
    "${x/a/b}",
    "${#x}",
    "${x^^}",
    "${arr[@]}",
    "${arr[1]}",
    "$((1 + 2))",
    "$((x * 3))",
    "$(echo s)",
    "`echo t`",
    "*",
    "/m/*",
    "~",
    "$1",
    "$@",
    "$#",
    "$?",
    "$$",
    "{a,b}",
    "{1..3}",
    "\\$",
    "-n",
    "-e",
    "-r",
    "-f",
    "-d",
    "--",
    "0.01",
    "1",
    "-1",
    "/m",
    "/m/a",
    "/m/b/c",
    "/tmp",
    "/",
    "..",
    ".",
    "'.'",
    "'[a-z]+'",
    "'{print $1}'",
    "'s/a/b/g'",
    "%s\\\\n",
    "''",
    "\"\"",
    "x=1",
    "arr=(a b c)"
  ]

  @redirects [
    "",
    "",
    "",
    " > /m/out",
    " >> /m/out",
    " < /m/out",
    " 2>&1",
    " 2>/dev/null",
    " >/dev/null",
    " <<< word",
    " <<'E'\nheredoc line\nE\n",
    " &",
    " | cat",
    " | wc -l"
  ]

  @doc "A syntactically plausible script from a small bash grammar."
  def script, do: T.sized(fn size -> script(min(size, 12)) end)

  defp script(0), do: simple_command()

  defp script(n) do
    half = div(n, 2)
    sub = fn -> T.lazy(fn -> script(half) end) end

    T.frequency([
      {6, simple_command()},
      {2, cat([sub.(), T.elements([" | ", " && ", " || ", "; ", "\n"]), sub.()])},
      {1, cat(["if ", sub.(), "; then ", sub.(), "; else ", sub.(), "; fi"])},
      {1, cat(["for i in ", word(), " ", word(), "; do ", sub.(), "; done"])},
      {1, cat(["n=0; while [ $n -lt 3 ]; do n=$((n+1)); ", sub.(), "; done"])},
      {1, cat(["while ", sub.(), "; do ", sub.(), "; break; done"])},
      {1, cat(["f() { ", sub.(), "; }; f ", word()])},
      {1, cat(["g() { local v=", word(), "; ", sub.(), "; return 3; }; g; echo $?"])},
      {1, cat(["( ", sub.(), " )"])},
      {1, cat(["{ ", sub.(), "; }"])},
      {1, cat(["x=$(", sub.(), ")"])},
      {1, cat(["case ", word(), " in a*) ", sub.(), ";; *) ", sub.(), ";; esac"])},
      {1, cat(["[[ ", word(), " == ", word(), " ]] && ", sub.()])},
      {1, cat(["trap ", map(word(), &quoted/1), " ERR; ", sub.()])}
    ])
  end

  defp word do
    T.frequency([
      {8, T.elements(@words)},
      {1, map(utf8(), &quoted/1)},
      {1, map(T.integer(), &Integer.to_string/1)}
    ])
  end

  defp simple_command do
    cat([
      T.elements(@commands),
      map(T.resize(4, T.list(word())), fn words -> Enum.map_join(words, "", &(" " <> &1)) end),
      T.elements(@redirects)
    ])
  end

  @specials ["\"", "'", "`", "$", "(", ")", "{", "}", "[", "]", ";", "|", "&", "<", ">"] ++
              [
                "\\",
                "!",
                "*",
                "?",
                "#",
                "~",
                "=",
                "%",
                "^",
                "-",
                "\n",
                " ",
                "$(",
                "${",
                "<<",
                "((",
                "))"
              ]

  @doc "A grammar script with random shell metacharacters inserted."
  def mutated_script do
    T.bind(
      T.tuple([
        script(),
        T.non_empty(T.list(T.tuple([T.non_neg_integer(), T.elements(@specials)])))
      ]),
      fn {script, edits} ->
        T.exactly(
          Enum.reduce(edits, script, fn {at, text}, acc ->
            at = rem(at, String.length(acc) + 1)
            {left, right} = String.split_at(acc, at)
            left <> text <> right
          end)
        )
      end,
      false
    )
  end

  # -- options for Session.new/1 ------------------------------------------------

  # The option and limit keys new/1 knows, from the one place that defines them.
  @known_keys ExBashkit.Session.Options.known_options()
  @limit_keys ExBashkit.Session.Options.limit_keys()

  @doc """
  A random term to pass as `Session.new/1` options: mostly keyword lists (or
  maps) of known options with values that are usually well-formed and
  sometimes not, plus unknown keys, junk entries and arbitrary terms.

  `scratch` is a throw-away host directory: the only host path a generated
  mount ever names (see the `:mounts` values), so a generated option can never
  make a session write anywhere else on the host.
  """
  def options(scratch) do
    T.frequency([
      {1, T.any()},
      {1, T.list(T.oneof([T.tuple([T.atom(), T.any()]), T.any()]))},
      {10, keyword(scratch)},
      {2, map(keyword(scratch), &Map.new/1)},
      {1,
       map(T.tuple([keyword(scratch), T.tuple([T.atom(), T.any()])]), fn {kw, extra} ->
         kw ++ [extra]
       end)}
    ])
  end

  defp keyword(scratch) do
    T.bind(
      T.list(T.elements(@known_keys)),
      fn keys ->
        T.fixed_list(
          for key <- Enum.uniq(keys), do: T.tuple([const(key), option_value(key, scratch)])
        )
      end,
      false
    )
  end

  # Usually well-formed, sometimes anything at all.
  defp valid_or_not(valid, invalid), do: T.frequency([{5, valid}, {1, invalid}])

  @vfs_paths ["/", "/m", "/m/a", "/tmp/x", "/work", "/a/../b", "//x//", "rel/path"]

  defp path do
    T.frequency([
      {4, T.elements(["/", "/m", "/m/a", "/tmp/x", "/work", "rel/path", "", "/a/../b", "//x//"])},
      {1, utf8()},
      {1, bytes()},
      {1, T.list(T.char())},
      {1, T.any()}
    ])
  end

  defp text do
    T.frequency([
      {3, T.elements(["", "x", "a=b", "sandbox", "with space", <<0>>, <<255>>])},
      {2, utf8()},
      {1, bytes()},
      {1, T.atom()},
      {1, T.integer()},
      {1, T.float()},
      {1, T.any()}
    ])
  end

  defp pairs(key, value) do
    T.oneof([
      T.list(T.tuple([key, value])),
      map(T.list(T.tuple([key, value])), &to_map/1),
      T.any()
    ])
  end

  defp to_map(entries), do: entries |> Enum.filter(&match?({_, _}, &1)) |> Map.new()

  defp count do
    T.oneof([
      T.non_neg_integer(),
      T.elements([0, 1, 0xFFFF_FFFF_FFFF_FFFF, 0x1_0000_0000_0000_0000, -1, 10 ** 30]),
      T.integer(),
      T.any()
    ])
  end

  defp option_value(:env, _) do
    valid =
      T.list(
        T.tuple([
          T.elements(["A", "B_1", :LANG, "é"]),
          T.elements(["x", "", "é ü", 1, 1.5, :atom])
        ])
      )

    valid_or_not(T.oneof([valid, map(valid, &Map.new/1)]), pairs(text(), text()))
  end

  defp option_value(:cwd, _), do: valid_or_not(T.elements(@vfs_paths), path())

  defp option_value(key, _) when key in [:username, :hostname],
    do: valid_or_not(T.elements(["sandbox", "agent", "host-1", "ü"]), text())

  defp option_value(:files, _) do
    valid =
      T.list(
        T.tuple([T.elements(@vfs_paths -- ["/"]), T.oneof([bytes(), utf8(), T.list(T.byte())])])
      )

    valid_or_not(
      T.oneof([valid, map(valid, &Map.new/1)]),
      pairs(path(), T.oneof([bytes(), T.any()]))
    )
  end

  defp option_value(:mounts, scratch) do
    # Every host path lives under the scratch directory (made by the test):
    # a plain dir, paths bashkit refuses as sensitive (.ssh, .aws), a file,
    # a missing path, or not a path at all. Nothing else on the host can be
    # mounted, whatever the mode, even if a bug let a mount through.
    host =
      T.oneof([
        T.elements([
          scratch,
          Path.join(scratch, ".ssh"),
          Path.join(scratch, ".aws"),
          Path.join(scratch, "file"),
          Path.join(scratch, "missing")
        ]),
        T.elements(["relative", ""]),
        T.integer()
      ])

    valid =
      T.tuple([
        T.elements(["/data", "/m/a", "/work"]),
        const(scratch),
        T.elements([:read_only, :read_write])
      ])

    mode = T.oneof([T.elements([:read_only, :read_write]), T.any()])
    invalid = T.oneof([T.tuple([path(), host, mode]), T.tuple([path(), host]), T.integer()])
    valid_or_not(T.list(valid_or_not(valid, invalid)), T.oneof([T.integer(), T.binary()]))
  end

  defp option_value(:allowed_mount_paths, scratch),
    do:
      valid_or_not(T.list(T.elements([scratch, "/", "/tmp"])), T.oneof([T.list(path()), T.any()]))

  defp option_value(:limits, _) do
    valid =
      T.list(
        T.tuple([
          T.elements(@limit_keys),
          T.oneof([T.range(1, 100_000), T.elements([0, 0xFFFF_FFFF_FFFF_FFFF, 10 ** 30])])
        ])
      )

    invalid =
      pairs(T.frequency([{6, T.elements(@limit_keys)}, {1, T.atom()}, {1, T.any()}]), count())

    valid_or_not(T.oneof([valid, map(valid, &Map.new/1)]), invalid)
  end

  defp option_value(:allow_net, _) do
    valid =
      T.elements(["http://127.0.0.1:1", "https://example.invalid/v1", "http://[::1]:8080/x"])

    invalid =
      T.oneof([
        T.elements([
          "ftp://x",
          "http://",
          "not a url",
          "http://u:p@h/",
          "http://h/?q=1",
          "http://h/#f"
        ]),
        utf8(),
        T.any()
      ])

    valid_or_not(T.oneof([const(:all), T.list(valid)]), T.oneof([T.list(invalid), T.any()]))
  end

  defp option_value(:block_private_ips, _), do: valid_or_not(T.boolean(), T.any())

  defp option_value(:builtins, _) do
    fun = const(fn _call -> {:ok, "builtin\n"} end)

    valid =
      map(T.list(T.tuple([T.elements(["tool", "a.b", "x-1", :atom_name]), fun])), &Map.new/1)

    invalid =
      pairs(T.oneof([T.elements(["bad name", "", "a/b"]), text()]), T.oneof([fun, T.any()]))

    valid_or_not(valid, invalid)
  end

  defp option_value(:max_reply_bytes, _),
    do: valid_or_not(T.oneof([T.pos_integer(), const(10_000_000)]), count())

  defp option_value(:builtin_timeout_ms, _),
    do: valid_or_not(T.oneof([T.pos_integer(), const(10 ** 30)]), count())

  defp option_value(:virtual_fs, _) do
    fun = const(fn _request -> {:error, :enotsup} end)
    valid = map(T.list(T.tuple([T.elements(["/v", "/m/v", "/api/"]), fun])), &Map.new/1)

    invalid =
      pairs(path(), T.oneof([fun, T.atom(), T.tuple([T.atom(), T.any()]), const(Enum), T.any()]))

    valid_or_not(valid, invalid)
  end

  # An empty archive, or garbage bytes, `{:file, _}` of paths that do not
  # exist, anything; reading is all a generated `:rootfs` does to the host.
  defp option_value(:rootfs, _) do
    empty = <<0::size(1024)-unit(8)>>
    invalid = T.oneof([bytes(), T.tuple([const(:file), T.elements(["", "/nonexistent.tar"])])])
    valid_or_not(T.elements([nil, empty]), T.oneof([invalid, T.any()]))
  end

  defp option_value(:base, _), do: valid_or_not(const(nil), T.any())

  # Any term is a group; a few, so that generated sessions share their
  # groups' processes rather than start one each.
  defp option_value(:group, _), do: T.elements([nil, :tenant, {:tenant, 2}, "agent"])

  defp option_value(:commands, _),
    do:
      valid_or_not(
        T.oneof([const(nil), const(allow: ["ls", "cat"]), const(deny: ["curl"])]),
        T.oneof([T.list(T.tuple([T.elements([:allow, :deny]), T.any()])), T.any()])
      )

  defp option_value(:soft_delete, _),
    do:
      valid_or_not(
        T.oneof([T.boolean(), const(trash: "/.bin")]),
        T.oneof([T.list(T.tuple([const(:trash), T.any()])), T.any()])
      )

  # A credential's prefix must be in :allow_net: often it is not, and new/1
  # must refuse that with an ArgumentError.
  defp option_value(:credentials, _),
    do:
      valid_or_not(
        T.oneof([const([]), const([{"https://api.example.com/", bearer: "token"}])]),
        T.any()
      )

  defp option_value(:egress, _),
    do: valid_or_not(T.oneof([const(nil), const(fn _ -> :allow end)]), T.any())

  defp option_value(:isolation, _),
    do: valid_or_not(T.elements([:process, :in_node]), T.any())

  defp option_value(:python, _),
    do:
      valid_or_not(
        T.boolean(),
        T.oneof([T.list(T.tuple([T.elements([:name, :names]), T.any()])), T.any()])
      )

  defp option_value(key, _) when key in [:sqlite, :typescript, :durable],
    do: valid_or_not(T.boolean(), T.any())

  # A listed remote needs :allow_net to cover it: often it does not, and
  # new/1 must refuse that with an ArgumentError.
  defp option_value(:git, _),
    do:
      valid_or_not(
        T.oneof([
          T.boolean(),
          const(author: {"Agent", "agent@example.com"}),
          const(remotes: ["https://git.example.com/org/"])
        ]),
        T.oneof([T.list(T.tuple([T.elements([:author, :remotes]), T.any()])), T.any()])
      )
end
