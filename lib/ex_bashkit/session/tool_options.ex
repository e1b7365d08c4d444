defmodule ExBashkit.Session.ToolOptions do
  @moduledoc false
  # The `:git`, `:sqlite` and `:typescript` options of `ExBashkit.Session.new/1`
  # (the tools of bashkit's cargo features of those names), validated into
  # the native map's `git`, `sqlite` and `typescript` keys
  # (`native/ex_bashkit/src/tools.rs`). A malformed value raises
  # `ArgumentError` naming the option.
  #
  # Whether a git remote lies within the session's network access is decided
  # natively, with the same URL parser and allowlist as `:allow_net`.

  # bashkit's virtual identity, used when `:git` names no author.
  @default_author {"sandbox", "sandbox@bashkit.local"}

  @sqlite_commands ["sqlite", "sqlite3"]
  @typescript_commands ["ts", "typescript", "node", "deno", "bun"]

  @doc false
  # `%{git: nil | %{author_name:, author_email:, remotes:}, sqlite: bool,
  # typescript: bool}` from the user's options.
  @spec parse!(keyword()) :: %{git: map() | nil, sqlite: boolean(), typescript: boolean()}
  def parse!(opts) do
    %{
      git: git!(Keyword.get(opts, :git, false)),
      sqlite: flag!(Keyword.get(opts, :sqlite, false), :sqlite),
      typescript: flag!(Keyword.get(opts, :typescript, false), :typescript)
    }
  end

  @doc false
  # The command names the granted tools take (for conflicts with `:builtins`
  # and `:python`).
  @spec commands(map()) :: [String.t()]
  def commands(%{git: git, sqlite: sqlite, typescript: typescript}) do
    if(git, do: ["git"], else: []) ++
      if(sqlite, do: @sqlite_commands, else: []) ++
      if typescript, do: @typescript_commands, else: []
  end

  @doc false
  # A `:builtins` function or a `:python` name under a command a granted tool
  # takes would silently replace one or the other.
  @spec check_conflicts!(map(), [String.t()], map()) :: :ok
  def check_conflicts!(tools, python_names, builtins) do
    taken = commands(tools)

    case Enum.filter(taken, &(Map.has_key?(builtins, &1) or &1 in python_names)) do
      [] ->
        :ok

      names ->
        raise ArgumentError,
              ":git, :sqlite or :typescript take the command name(s) #{inspect(names)}, " <>
                "which :builtins or :python also define; rename one of them"
    end
  end

  defp flag!(value, _option) when is_boolean(value), do: value

  defp flag!(value, option),
    do: raise(ArgumentError, "#{inspect(option)} must be a boolean, got: #{inspect(value)}")

  defp git!(false), do: nil
  defp git!(nil), do: nil
  defp git!(true), do: git!([])

  defp git!(opts) when is_list(opts) do
    unless Enum.all?(opts, &match?({key, _} when key in [:author, :remotes], &1)) do
      raise ArgumentError,
            ":git must be true or a keyword list with :author and :remotes, got: #{inspect(opts)}"
    end

    {name, email} = author!(Keyword.get(opts, :author, @default_author))

    %{
      author_name: name,
      author_email: email,
      remotes: remotes!(Keyword.get(opts, :remotes, []))
    }
  end

  defp git!(other),
    do:
      raise(
        ArgumentError,
        ":git must be a boolean or a keyword list ([author: {name, email}, remotes: [url]]), " <>
          "got: #{inspect(other)}"
      )

  # The identity ends up in `.git/config` and in bashkit's commit records,
  # whose fields are `|`-separated lines: a newline, a `|` or a control
  # character would forge entries there; `<` and `>` would make the
  # "Name <email>" of `git log` ambiguous.
  defp author!({name, email}) do
    name = identity_part!(name, "name")
    email = identity_part!(email, "email")

    if email =~ ~r/\s/u do
      raise ArgumentError, ":git author email must not contain whitespace, got: #{inspect(email)}"
    end

    {name, email}
  end

  defp author!(other),
    do:
      raise(
        ArgumentError,
        ":git author must be a {name, email} tuple of strings, got: #{inspect(other)}"
      )

  defp identity_part!(value, what) when is_binary(value) do
    cond do
      not String.valid?(value) ->
        raise ArgumentError, ":git author #{what} must be valid UTF-8, got: #{inspect(value)}"

      String.trim(value) == "" ->
        raise ArgumentError, ":git author #{what} must not be blank"

      value =~ ~r/[|<>\x00-\x1f\x7f]/u ->
        raise ArgumentError,
              ":git author #{what} must not contain |, <, > or control characters, " <>
                "got: #{inspect(value)}"

      true ->
        value
    end
  end

  defp identity_part!(value, what),
    do: raise(ArgumentError, ":git author #{what} must be a string, got: #{inspect(value)}")

  defp remotes!(patterns) when is_list(patterns), do: Enum.map(patterns, &remote!/1)

  defp remotes!(other),
    do:
      raise(ArgumentError, ":git remotes must be a list of URL patterns, got: #{inspect(other)}")

  # The shape `:allow_net` patterns have: http(s), a host, no credentials,
  # query or fragment.
  defp remote!(pattern) when is_binary(pattern) do
    valid? =
      String.valid?(pattern) and not String.contains?(pattern, <<0>>) and
        match?(
          {:ok, %URI{scheme: scheme, host: host, userinfo: nil, query: nil, fragment: nil}}
          when scheme in ["http", "https"] and is_binary(host) and host != "",
          URI.new(pattern)
        )

    if valid?,
      do: pattern,
      else: remote_error!(pattern)
  end

  defp remote!(other), do: remote_error!(other)

  defp remote_error!(pattern) do
    raise ArgumentError,
          ":git remote #{inspect(pattern)} is not a URL prefix like \"https://git.example.com/org/\" " <>
            "(scheme http or https, a host, no credentials, query or fragment)"
  end
end
